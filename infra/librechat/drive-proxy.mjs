// engram's proxy driven by LibreChat's own agent runtime (@librechat/agents, pinned in package.json), the way
// LibreChat's server drives a custom OpenAI endpoint: a Run of a standard graph for a chat turn (streamed or
// not, with a tool or not), and Run.generateTitle for a title by either title method. One JSON argument:
// {action: "chat" | "stream" | "tools" | "title", baseURL, apiKey, headers, say, titleMethod}.
// Prints one JSON line: the run's content parts, or the title.
import { randomUUID } from 'node:crypto';
import { HumanMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { Providers, Run, TitleMethod } from '@librechat/agents';

const args = JSON.parse(process.argv[2]);
// LibreChat's custom endpoints are OpenAI-compatible clients with the endpoint's baseURL and headers
const llmConfig = {
  provider: Providers.OPENAI,
  model: 'fake-model',
  apiKey: args.apiKey,
  streaming: args.action !== 'chat',
  configuration: { baseURL: args.baseURL, defaultHeaders: args.headers },
};

// a tool of the test's own: its result holds words that are not the user's
const webSearch = tool(async ({ query }) => `Tasca Verde. My favourite dish is bacalhau. (${query})`, {
  name: 'web_search',
  description: 'Search the web',
  schema: { type: 'object', properties: { query: { type: 'string' } } },
});

const run = await Run.create({
  runId: randomUUID(),
  graphConfig: {
    type: 'standard',
    instructions: 'You are a helpful assistant.',
    llmConfig,
    tools: args.action === 'tools' ? [webSearch] : [],
  },
  returnContent: true,
});

if (args.action === 'title') {
  const title = await run.generateTitle({
    provider: Providers.OPENAI,
    inputText: args.say,
    contentParts: [{ type: 'text', text: 'Porto is lovely.' }],
    titleMethod: args.titleMethod === 'structured' ? TitleMethod.STRUCTURED : TitleMethod.COMPLETION,
    clientOptions: llmConfig,
    skipLanguage: true,
  });
  console.log(JSON.stringify(title));
} else {
  const content = await run.processStream(
    { messages: [new HumanMessage(args.say)] },
    { runId: randomUUID(), streamMode: 'values', version: 'v2' },
  );
  console.log(JSON.stringify({ content }));
}
// a finished run may leave timers behind (LangChain's tokenizer fetch retries offline): done is done
process.exit(0);
