// DynamoDB for the local stack: dynalite on LevelDB at argv[2], on argv[3]:argv[4] (port 0: a free one).
// Prints {"port": N} once listening. Exits when its parent does (stdin closes), so a killed stack
// never leaves a server holding the LevelDB lock that the next start needs.
const dynalite = require('dynalite')

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
process.stdin.on('end', quit)
process.stdin.on('error', quit)
process.stdin.resume()
process.on('SIGTERM', quit)
process.on('SIGINT', quit)
