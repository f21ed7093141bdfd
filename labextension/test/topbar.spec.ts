/**
 * The item in a shell's top area, as where there is no status bar (Notebook 7): it shows and
 * hides itself, as the status bar would show and hide it.
 */

import { MessageLoop } from '@lumino/messaging';
import { Panel, Widget } from '@lumino/widgets';
import { act } from 'react';

import { SchedConnection } from '../src/comm';
import { addTopItem, TOP_RANK } from '../src/topbar';
import { FakeContext, FakeKernel, snapshotMessage } from './fakes';

/** Notebook 7's shell, as far as the item uses it: a top area. */
class TopShell {
  top = new Panel();
  added: Array<{ area: string | undefined; rank: number | undefined }> = [];
  add(widget: Widget, area?: string, options?: { rank?: number }): void {
    this.added.push({ area, rank: options?.rank });
    this.top.addWidget(widget);
  }
}

function flush(): void {
  act(() => {
    MessageLoop.flush();
    MessageLoop.flush();
  });
}

describe('The item in the top area', () => {
  it('shows the figures while the kernel answers, and opens the sidebar on a click', () => {
    const shell = new TopShell();
    Widget.attach(shell.top, document.body);
    const connection = new SchedConnection({ interval: 0.5, window: 300 });
    const clicked = jest.fn();
    let item!: ReturnType<typeof addTopItem>;
    act(() => {
      item = addTopItem(shell as any, connection, clicked);
    });
    expect(shell.added).toEqual([{ area: 'top', rank: TOP_RANK }]);
    expect(item.isHidden).toBe(true);

    const kernel = new FakeKernel();
    connection.follow(new FakeContext(kernel) as any);
    kernel.last.receive(
      snapshotMessage(1, 10, {
        gpu: { allocated: 1.5, total: 2 },
        counts: { running: 2, queued: 1 },
        nodes: [],
        notices: []
      })
    );
    flush();
    expect(item.isHidden).toBe(false);
    const button = item.node.querySelector('button') as HTMLButtonElement;
    expect(button.textContent).toBe('GPU 1.5/2 · 2 running · 1 queued');
    button.click();
    expect(clicked).toHaveBeenCalledTimes(1);

    kernel.setStatus('restarting');
    flush();
    expect(item.isHidden).toBe(true);
    act(() => {
      connection.dispose();
      shell.top.dispose();
    });
  });
});
