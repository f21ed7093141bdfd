/**
 * Notifications of what happens in notebooks the user is not looking at: a task that ended
 * or failed, a notice of the kernel (model/news.ts says what is news).
 *
 * The watcher holds one slow connection per open notebook (a `SchedConnection` of its own,
 * subscribed every 2 s with a short timeline), made when the notebook opens and disposed when
 * it closes; each connection follows its notebook's session, through kernel changes and
 * restarts, and opens no comm where the extension is not loaded but once more after a cell
 * runs, as the sidebar's connection does. A kernel's first snapshot, and the first after a
 * restart or a change of kernel, are what was there before: nothing in them is told.
 */

import type { ILabShell, JupyterFrontEnd } from '@jupyterlab/application';
import { ISessionContext, Notification } from '@jupyterlab/apputils';
import type { INotebookTracker } from '@jupyterlab/notebook';
import type { ISettingRegistry } from '@jupyterlab/settingregistry';
import type { ISignal } from '@lumino/signaling';
import type { Widget } from '@lumino/widgets';

import { SchedConnection } from './comm';
import { IKnown, INews, news } from './model/news';
import { ISnapshotData } from './schema';

/** Seconds between the watcher's snapshots at most: a toast may come this late. */
export const WATCH_INTERVAL = 2;
/** Seconds of timeline the watcher asks for: the least the kernel takes (it draws none). */
export const WATCH_WINDOW = 10;

/** A notebook panel, as the watcher uses one. */
export type Watched = Widget & { sessionContext: ISessionContext };

/** What of a connection the watcher uses (`SchedConnection` has it). */
export interface IWatchConnection {
  readonly changed: ISignal<unknown, void>;
  readonly snapshot: ISnapshotData | null;
  follow(context: ISessionContext | null): void;
  dispose(): void;
}

export interface IWatcherOptions {
  /** Notebooks opened later: the tracker's `widgetAdded`. */
  added: ISignal<unknown, Widget>;
  /** Whether `panel` is the notebook on show (its tasks are not told: they show there). */
  isActive: (panel: Watched) => boolean;
  /** Tell the user (a JupyterLab notification). */
  notify: (item: INews, panel: Watched) => void;
  /** A new connection for one notebook; by default a `SchedConnection` every 2 s. */
  connect?: () => IWatchConnection;
}

interface IEntry {
  connection: IWatchConnection;
  snapshot: ISnapshotData | null;
  kernel: string | null;
  known: IKnown | null;
}

export class NewsWatcher {
  constructor(options: IWatcherOptions) {
    this._options = options;
    options.added.connect(this._onAdded, this);
  }

  /** The notifications setting; off, what comes is known all the same but not told. */
  enabled = true;

  /** How many notebooks are watched. */
  get size(): number {
    return this._entries.size;
  }

  /** Watch `panel` (a notebook open before the watcher was made) until it is disposed. */
  watch(panel: Watched): void {
    if (this._disposed || panel.isDisposed || this._entries.has(panel)) {
      return;
    }
    const connection =
      this._options.connect?.() ??
      new SchedConnection({ interval: WATCH_INTERVAL, window: WATCH_WINDOW });
    const entry: IEntry = { connection, snapshot: null, kernel: null, known: null };
    this._entries.set(panel, entry);
    connection.changed.connect(() => this._onChanged(panel, entry));
    panel.disposed.connect(() => this._unwatch(panel));
    connection.follow(panel.sessionContext);
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._options.added.disconnect(this._onAdded, this);
    for (const panel of [...this._entries.keys()]) {
      this._unwatch(panel);
    }
  }

  private _onAdded(_: unknown, widget: Widget): void {
    if ('sessionContext' in widget) {
      this.watch(widget as Watched);
    }
  }

  private _unwatch(panel: Watched): void {
    const entry = this._entries.get(panel);
    if (entry) {
      this._entries.delete(panel);
      entry.connection.dispose(); // closes its comm
    }
  }

  private _onChanged(panel: Watched, entry: IEntry): void {
    const snapshot = entry.connection.snapshot;
    const kernel = panel.sessionContext.session?.kernel?.id ?? null;
    if (snapshot === null || kernel !== entry.kernel) {
      // restarted, changed kernel, unloaded: the next snapshot is what was there before
      entry.known = null;
      entry.kernel = kernel;
    }
    if (snapshot === null || snapshot === entry.snapshot) {
      entry.snapshot = snapshot;
      return;
    }
    entry.snapshot = snapshot;
    const found = news(entry.known, snapshot, {
      notebook: panel.sessionContext.name || panel.title.label,
      active: this._options.isActive(panel),
      enabled: this.enabled
    });
    entry.known = found.known;
    for (const item of found.news) {
      this._options.notify(item, panel);
    }
  }

  private _options: IWatcherOptions;
  private _entries = new Map<Watched, IEntry>();
  private _disposed = false;
}

/** How long a toast of a task done (or cancelled) shows; failures and notices stay. */
export const DONE_TOAST_MS = 8000;

/**
 * Watch every notebook `notebooks` tracks and tell of its news in JupyterLab notifications,
 * following the `notifications` setting of `pluginId`; `showSidebar` shows the Scheduler
 * sidebar (a notice's "Show" opens it at the banner with the whole text).
 */
export function startNotifications(
  app: JupyterFrontEnd,
  notebooks: INotebookTracker,
  labShell: ILabShell | null,
  settings: ISettingRegistry | null,
  pluginId: string,
  showSidebar: () => void
): NewsWatcher {
  const watcher = new NewsWatcher({
    added: notebooks.widgetAdded,
    isActive: panel =>
      (labShell ? labShell.currentWidget : notebooks.currentWidget) === panel &&
      document.visibilityState !== 'hidden',
    notify: (item, panel) => {
      const show = () => {
        if (!panel.isDisposed) {
          app.shell.activateById(panel.id);
          if (item.kind === 'notice') {
            showSidebar();
          }
        }
      };
      // plain text: JupyterLab draws a message as text, never as markup
      Notification.emit(item.text, item.level, {
        autoClose: item.level === 'success' || item.level === 'info' ? DONE_TOAST_MS : false,
        actions: [{ label: 'Show', caption: `Show ${panel.title.label}`, callback: show }]
      });
    }
  });
  notebooks.forEach(panel => watcher.watch(panel));
  settings
    ?.load(pluginId)
    .then(loaded => {
      const apply = () => {
        watcher.enabled = loaded.get('notifications').composite !== false;
      };
      apply();
      loaded.changed.connect(apply);
    })
    .catch(reason =>
      console.error(`jupyter_sched: could not load settings of ${pluginId}`, reason)
    );
  return watcher;
}
