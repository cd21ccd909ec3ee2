// Validates a librechat.yaml with LibreChat's own schema (librechat-data-provider's configSchema) and fails
// when the schema would drop anything the file says: zod strips keys it does not know, so a setting LibreChat
// ignores (a misspelling, a key from another version) passes a plain parse silently.
const fs = require('fs');
const yaml = require('js-yaml');
const { configSchema } = require('librechat-data-provider');

function dropped(written, parsed, path) {
  if (written === null || typeof written !== 'object') {
    return parsed === written ? [] : [`${path}: ${JSON.stringify(written)} became ${JSON.stringify(parsed)}`];
  }
  if (parsed === null || typeof parsed !== 'object') {
    return [`${path}: dropped`];
  }
  return Object.keys(written).flatMap((key) => dropped(written[key], parsed[key], `${path}.${key}`));
}

const doc = yaml.load(fs.readFileSync(process.argv[2], 'utf8'));
const result = configSchema.safeParse(doc);
if (!result.success) {
  console.error(JSON.stringify(result.error.issues, null, 1));
  process.exit(1);
}
const lost = dropped(doc, result.data, '$');
if (lost.length) {
  console.error(`LibreChat's schema does not keep:\n${lost.join('\n')}`);
  process.exit(1);
}
const version = JSON.parse(fs.readFileSync(require.resolve('librechat-data-provider').replace(/dist.*$/, 'package.json'), 'utf8')).version;
console.log(`valid for librechat-data-provider ${version}`);
