// DynamoDB for the local stack: dynalite on LevelDB at argv[2], on argv[3]:argv[4] (port 0: a free one).
// Prints {"port": N} once listening. Exits when its parent does (stdin closes), so a killed stack
// never leaves a server holding the LevelDB lock that the next start needs.
// dynalite turns LevelDB iterators into streams and, at their end, closes them through `iterator.return()`,
// which abstract-level's iterators do not have: every scan, query and ListTables left an iterator open,
// and each open iterator holds a LevelDB snapshot, so nothing deleted after it was ever dropped from disk.
const abstractLevel = require('abstract-level')
for (const Iterator of [abstractLevel.AbstractIterator, abstractLevel.AbstractKeyIterator,
  abstractLevel.AbstractValueIterator]) {
  if (!Iterator.prototype.return) Iterator.prototype.return = function () { return this.close() }
}
const dynalite = require('dynalite')
// The LevelDB store dynalite opens, kept so that a forget can compact it: LevelDB keeps deleted values in
// its log and table files until a compaction rewrites them (dynalite's own module, read from its cache).
const dynaliteDb = require('dynalite/db')
const createStore = dynaliteDb.create
let store = null
dynaliteDb.create = (options) => (store = createStore(options))

const [path, host = '127.0.0.1', port = '0'] = process.argv.slice(2)
if (!path) {
  console.error('usage: node serve.js <data path> [host] [port]')
  process.exit(2)
}
// Tables ACTIVE at once: the stack creates them at start and writes right after.
const server = dynalite({ path, createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })
server.listen(Number(port), host, () => console.log(JSON.stringify({ port: server.address().port })))

const quit = () => {
  server.close(() => process.exit(0))
  // Idle keep-alive connections would hold close() for its 30 s timeout; LevelDB has every
  // acknowledged write in its log already, so a short grace is enough.
  setTimeout(() => process.exit(0), 300).unref()
}
// "compact" on stdin: rewrite every key range, so no deleted value is left in any file; prints
// {"compacted": true} when done (infra/local_dynamodb.py waits for it). LevelDB's manual compaction flushes
// the memtable to a table file but only merges a level into the one below it, so the file the flush made
// (placed as deep as level 2) keeps the deleted values: two keys spanning every key, written and deleted,
// make the next flush overlap it, and the second compaction merges both into the bottom level, where
// deleted values and their markers are dropped.
const RANGE = [Buffer.from([0]), Buffer.alloc(17, 0xff), { keyEncoding: 'buffer' }]
const EDGES = [Buffer.from([0]), Buffer.alloc(16, 0xff)].map((key) => ({ key, keyEncoding: 'buffer' }))
const compact = async () => {
  try {
    await store.db.compactRange(...RANGE)
    await store.db.batch([
      ...EDGES.map((edge) => ({ type: 'put', value: 0, ...edge })),
      ...EDGES.map((edge) => ({ type: 'del', ...edge }))
    ])
    await store.db.compactRange(...RANGE)
    console.log(JSON.stringify({ compacted: true }))
  } catch (err) {
    console.log(JSON.stringify({ compacted: false, error: String(err) }))
  }
}
let pending = ''
process.stdin.setEncoding('utf8')
process.stdin.on('data', (chunk) => {
  pending += chunk
  for (let nl = pending.indexOf('\n'); nl >= 0; nl = pending.indexOf('\n')) {
    const line = pending.slice(0, nl).trim()
    pending = pending.slice(nl + 1)
    if (line === 'compact') compact()
  }
})
process.stdin.on('end', quit)
process.stdin.on('error', quit)
process.stdin.resume()
process.on('SIGTERM', quit)
process.on('SIGINT', quit)
