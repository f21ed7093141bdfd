// Unit tests in jsdom: ts-jest for our sources, babel for the ES modules JupyterLab ships.
// Times of day are UTC, as in the kernel's output the tests read (test/fixtures, written by
// tests/lab_fixtures.py), whatever the machine's time zone.
process.env.TZ = 'UTC';
const jestJupyterLab = require('@jupyterlab/testing/lib/jest-config');

const esModules = [
  '@codemirror',
  '@jupyter/ydoc',
  '@jupyter/react-components',
  '@jupyter/web-components',
  '@jupyterlab/',
  '@microsoft',
  'exenv-es6',
  'lib0',
  'nanoid',
  'vscode-ws-jsonrpc',
  'y-protocols',
  'y-websocket',
  'yjs'
].join('|');

const base = jestJupyterLab(__dirname);

module.exports = {
  ...base,
  automock: false,
  reporters: ['default'],
  setupFiles: [...base.setupFiles, '<rootDir>/test/setup.ts'],
  testRegex: 'test/.*\\.spec\\.tsx?$',
  transformIgnorePatterns: [`/node_modules/(?!${esModules}).+`]
};
