// Removes build outputs (paths relative to labextension/), without a dependency for it.
const fs = require('fs');
const path = require('path');

for (const target of process.argv.slice(2)) {
  fs.rmSync(path.resolve(__dirname, '..', target), { recursive: true, force: true });
}
