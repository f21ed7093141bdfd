// jsdom has no system clipboard; JupyterLab's apputils warns about that when imported.
if (!(navigator as any).clipboard) {
  Object.defineProperty(navigator, 'clipboard', {
    value: { readText: async () => '', writeText: async () => undefined },
    configurable: true
  });
}
