/**
 * Which kernel the sidebar and the status-bar item follow: the one of the notebook or console
 * that is current. Other widgets becoming current (a file, a terminal) leave them on the last
 * kernel followed; closing the followed notebook moves them to the one that is current then.
 */

import type { ISessionContext } from '@jupyterlab/apputils';
import type { ISignal } from '@lumino/signaling';
import type { Widget } from '@lumino/widgets';

/** What of a notebook or console tracker is used here (`INotebookTracker` has it). */
export interface ITracker {
  readonly currentWidget: Widget | null;
  readonly currentChanged: ISignal<unknown, Widget | null>;
  readonly widgetAdded: ISignal<unknown, Widget>;
  has(widget: Widget): boolean;
}

/** What of the shell is used here (`ILabShell` has it). */
export interface IShell {
  readonly currentWidget: Widget | null;
  readonly currentChanged: ISignal<unknown, { newValue: Widget | null }>;
}

/** What follows: `SchedConnection`. */
export interface IFollower {
  follow(context: ISessionContext | null): void;
}

type Tracked = Widget & { sessionContext: ISessionContext };

export function followActiveKernel(
  connection: IFollower,
  trackers: ReadonlyArray<ITracker | null>,
  shell: IShell | null
): void {
  const known = trackers.filter((t): t is ITracker => t !== null);
  let followed: Tracked | null = null;
  const watched = new WeakSet<Widget>();

  const tracked = (widget: Widget | null | undefined): Tracked | null =>
    widget && !widget.isDisposed && known.some(t => t.has(widget)) ? (widget as Tracked) : null;

  /** The notebook or console to follow now: the shell's current one, else a tracker's. */
  const current = (): Tracked | null => {
    for (const widget of [shell?.currentWidget, ...known.map(t => t.currentWidget)]) {
      const panel = tracked(widget);
      if (panel) {
        return panel;
      }
    }
    return null;
  };

  const follow = (panel: Tracked | null) => {
    if (panel === followed) {
      return;
    }
    followed = panel;
    connection.follow(panel?.sessionContext ?? null);
    if (panel && !watched.has(panel)) {
      watched.add(panel);
      // a panel's disposed signal comes before the shell and the trackers move on to the
      // next one, so which that is may be known only later (currentChanged then follows it)
      panel.disposed.connect(() => {
        if (followed === panel) {
          follow(current());
        }
      });
    }
  };

  const update = (widget: Widget | null) => {
    const panel = tracked(widget);
    if (panel) {
      follow(panel);
    }
  };
  shell?.currentChanged.connect((_, change) => update(change.newValue));
  // a notebook or console can become current before its tracker knows it: follow it when
  // tracked, if it is still the current widget (or always, in a shell without currentWidget)
  const onTracked = (_: unknown, widget: Widget | null) => {
    if (!shell || widget === shell.currentWidget) {
      update(widget);
    }
  };
  for (const tracker of known) {
    tracker.currentChanged.connect(onTracked);
    tracker.widgetAdded.connect(onTracked);
  }
  follow(current());
}
