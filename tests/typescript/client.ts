// A client generated from engram's OpenAPI document: openapi-typescript makes schema.d.ts from
// /openapi.json, openapi-fetch makes the calls typed by it. tsc --strict must accept every call here as the
// document describes it; run, it prints what the live stack answered (tests/integration/test_typescript_client.py).
import createClient from "openapi-fetch";
import type { paths } from "./schema.js";

const [url, key, bot] = process.argv.slice(2);
const engram = createClient<paths>({ baseUrl: url, headers: { Authorization: `Bearer ${key}` } });

const added = await engram.POST("/v1/bots/{bot}/memories", {
  params: { path: { bot } },
  body: { text: "The cat is called Miso.", userId: "ts-user" },
});
if (!added.data) throw new Error(`add failed: ${JSON.stringify(added.error)}`);

const found = await engram.GET("/v1/bots/{bot}/memories", {
  params: { path: { bot }, query: { query: "what is the cat called", userId: "ts-user", limit: 3 } },
});
const page = await engram.GET("/v1/bots/{bot}/memories", { params: { path: { bot }, query: { limit: 1 } } });
const missing = await engram.GET("/v1/bots/{bot}/memories/{memory_id}", {
  params: { path: { bot, memory_id: "mem:1" } },
});
const key_ = await engram.POST("/v1/bots/{bot}/users/{userId}/keys", {
  params: { path: { bot, userId: "ts-user" } },
  body: { name: "from TypeScript" },
});

console.log(
  JSON.stringify({
    added: added.data.id,
    found: (found.data?.memories ?? []).map((m) => m.text),
    meaning: found.data?.meaning ?? null,
    pageNext: page.data?.next ?? null,
    missingStatus: missing.response.status,
    missingType: missing.response.headers.get("content-type"),
    missingCode: missing.error?.code ?? null,
    keyPrefix: key_.data?.key.slice(0, 4) ?? null,
  }),
);
