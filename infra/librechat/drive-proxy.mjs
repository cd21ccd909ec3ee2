// engram's proxy driven by LibreChat's own agent runtime (@librechat/agents, pinned in package.json), the way
// LibreChat's server drives a custom OpenAI endpoint: a Run of a standard graph for a chat turn (streamed or
// not, with a tool or not, with LibreChat's inline memory tools), its memory agent's run, Run.generateTitle
// for a title by either title method, Run.generateReasoningLabel and generateActivityLabel for its labels,
// and a summary or a manual compaction as the package builds their instruction. One JSON argument:
// {action, baseURL, apiKey, headers, say, titleMethod}. Prints one JSON line: the run's content parts, the
// title, or the label.
//
// What only LibreChat's server (packages/api, not published) adds is copied from its source, cited where used.
import { randomUUID } from 'node:crypto';
import { AIMessage, HumanMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { Providers, Run, TitleMethod, buildSummarizationInstruction, initializeModel } from '@librechat/agents';

// the package's own modules its main entry does not re-export (the prompts, the semantic index renderer)
const dist = new URL('./node_modules/@librechat/agents/dist/esm/', import.meta.url);
const { DEFAULT_SUMMARIZATION_PROMPT } = await import(new URL('summarization/shared.mjs', dist));
const { renderCompactionSemanticIndex } = await import(new URL('summarization/semanticIndex.mjs', dist));

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

// LibreChat packages/api/src/agents/memory.ts @ 007bfc5d5ad0: its memory tools' names and schemas, the
// default instructions' first line, the memory status processMemory appends, and the guard an agent with
// the tools inline gets
const memoryTool = (name, properties) =>
  tool(async () => 'Memory set', {
    name,
    description: name === 'set_memory' ? 'Saves important information about the user into memory.' : 'Deletes specific memory data about the user using the provided key.',
    schema: { type: 'object', properties, required: Object.keys(properties) },
  });
const memoryTools = () => [
  memoryTool('set_memory', { key: { type: 'string' }, value: { type: 'string' } }),
  memoryTool('delete_memory', { key: { type: 'string' } }),
];
const MEMORY_AGENT_INSTRUCTIONS =
  'Use the `set_memory` tool to save important information about the user, but ONLY when the user has requested you to remember something.';
const MEMORY_STATUS = '# Existing memory:\nNo existing memories';
const MEMORY_TOOL_USAGE_GUARD =
  'Only use the `set_memory` and `delete_memory` tools when the user explicitly asks you to remember, update, or forget something (e.g. "remember that...", "don\'t forget...", "forget..."). Never store information merely because the user mentioned it in conversation.';
// LibreChat packages/api/src/agents/compact/summary.ts @ dce2a1f77a79: the manual compaction's prompt
const DEFAULT_COMPACTION_PROMPT =
  'Write a checkpoint of everything so far. This checkpoint replaces the messages above, so capture everything needed to pick right back up.';

const graphs = {
  chat: { instructions: 'You are a helpful assistant.', tools: [] },
  stream: { instructions: 'You are a helpful assistant.', tools: [] },
  tools: { instructions: 'You are a helpful assistant.', tools: [webSearch] },
  // a chat agent with LibreChat's memory capability on: the tools inline, the guard in its instructions
  'memory-tools': { instructions: `You are a helpful assistant.\n\n${MEMORY_TOOL_USAGE_GUARD}`, tools: memoryTools() },
  // LibreChat's memory agent: its own run after the turn (processMemory)
  'memory-agent': { instructions: MEMORY_AGENT_INSTRUCTIONS, additional_instructions: MEMORY_STATUS, tools: memoryTools() },
};
const graph = graphs[args.action] ?? graphs.chat;
const run = await Run.create({
  runId: randomUUID(),
  graphConfig: { type: 'standard', llmConfig, ...graph },
  returnContent: true,
});


if (args.action === 'reasoning-label') {
  const label = await run.generateReasoningLabel({
    provider: Providers.OPENAI,
    clientOptions: llmConfig,
    visibleReasoning: args.say,
    reasoningStepId: 'step-1',
    revision: 0,
    status: 'streaming',
  });
  console.log(JSON.stringify(label));
} else if (args.action === 'activity-label') {
  const label = await run.generateActivityLabel({
    provider: Providers.OPENAI,
    clientOptions: llmConfig,
    entries: [{ toolName: 'web_search', toolInput: { query: args.say }, toolOutput: 'Tasca Verde', status: 'success' }],
    lastAssistantText: args.say,
  });
  console.log(JSON.stringify(label));
} else if (args.action === 'summary' || args.action === 'compaction') {
  // the summarize node's call (summarization/node.ts: the history, then the instruction as a user message),
  // its semantic index rendered by the package from one committed activity phase of the history
  const source = new AIMessage({
    content: 'Porto is lovely.',
    additional_kwargs: { provenance: { version: 1, parts: [{ attribution: 'model', sourceMessageId: 'msg-1', sourceContentPartIndices: [0] }] } },
  });
  const index = [{ type: 'activity_phase', sourceMessageId: 'msg-1', sourceContentIndex: 0, revision: 0, status: 'committed', text: 'Looked up restaurants in Porto' }];
  const { appendix } = renderCompactionSemanticIndex(index, [source]);
  if (!appendix) throw new Error('the package rendered no semantic index');
  const prompt = args.action === 'summary' ? DEFAULT_SUMMARIZATION_PROMPT : DEFAULT_COMPACTION_PROMPT;
  const instruction = buildSummarizationInstruction(prompt, undefined, undefined, appendix);
  const model = initializeModel({ provider: Providers.OPENAI, clientOptions: { ...llmConfig, streaming: false } });
  const answer = await model.invoke([new HumanMessage(args.say), source, new HumanMessage(instruction)]);
  console.log(JSON.stringify({ summary: answer.content }));
} else if (args.action === 'title') {
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
