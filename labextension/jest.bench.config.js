// The benchmark runs in the same jsdom set-up as the tests, one file, no other tests.
const config = require('./jest.config');

module.exports = { ...config, testRegex: 'bench/.*\\.bench\\.tsx?$', testTimeout: 120000 };
