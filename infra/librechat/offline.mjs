// Loaded before the driver (node --import): this machine reaches no host but its own, and LangChain fetches
// its tokenizer from tiktoken.pages.dev on first use, waiting on DNS each time before falling back to an
// estimate. Refused at once instead; engram on 127.0.0.1 is reached as usual.
// With LIBRECHAT_SENT set, the body of every request sent is appended to that file, one JSON line each (a test
// compares what LibreChat's runtime sent with what the provider received, byte for byte).
import { appendFileSync } from 'node:fs';

const realFetch = globalThis.fetch;
globalThis.fetch = (input, init) => {
  const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
  if (url.hostname !== '127.0.0.1' && url.hostname !== 'localhost') {
    return Promise.reject(new TypeError(`no network here: ${url.hostname}`));
  }
  if (process.env.LIBRECHAT_SENT && typeof init?.body === 'string') {
    appendFileSync(process.env.LIBRECHAT_SENT, JSON.stringify({ url: url.href, body: init.body }) + '\n');
  }
  return realFetch(input, init);
};
