import * as React from 'react';

import { StatusText } from '../src/statusbar';
import { click, render } from './helpers';

describe('StatusText', () => {
  it('is a labelled button that opens the sidebar', () => {
    let clicked = 0;
    const { container, unmount } = render(
      <StatusText text="GPU 1.5/2 · 2 running · 3 queued" onClick={() => (clicked += 1)} />
    );
    const button = container.querySelector('button.jp-sched-statusbar-button') as HTMLButtonElement;
    expect(button.textContent).toBe('GPU 1.5/2 · 2 running · 3 queued');
    click(button);
    expect(clicked).toBe(1);
    unmount();
  });
});

describe('StatusText with a notice', () => {
  it('puts the ⚠ before the figures, apart, and says so in its name', () => {
    const { container, unmount } = render(
      <StatusText
        text="GPU 1.5/2 · 2 running · 1 queued · others 0.5"
        marker="⚠"
        notices={1}
        title="Scheduler: GPU 1.5/2 · 2 running · 1 queued · others 0.5. 1 notice to read. Show the Scheduler sidebar"
        onClick={() => undefined}
      />
    );
    const button = container.querySelector('button') as HTMLButtonElement;
    expect(button.textContent).toBe('⚠ GPU 1.5/2 · 2 running · 1 queued · others 0.5');
    expect(button.dataset.notices).toBe('1');
    expect(button.querySelector('.jp-sched-statusbar-marker')?.getAttribute('aria-hidden')).toBe(
      'true'
    );
    expect(button.getAttribute('aria-label')).toContain('1 notice to read');
    unmount();
  });
});
