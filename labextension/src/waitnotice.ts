/**
 * While a notebook's kernel waits for its GPU (a provisioned kernel: it leases before it
 * starts), the notebook shows where it waits: "waiting for a GPU: 2nd on this host, held by
 * ana (0.5)", a notification updated in place with a button that shuts the kernel down (which
 * ends the wait), dismissed once the kernel starts or its wait ends. The host view is fetched
 * only while some open notebook's kernel is starting (model/kernelwait.ts finds its wait).
 */

import { Notification } from '@jupyterlab/apputils';
import type { INotebookTracker } from '@jupyterlab/notebook';

import { HostPoller } from './hostpoll';
import { IKernelWaitNotice, kernelWait } from './model/kernelwait';

/** How often whether a notebook's kernel is starting is looked at (no fetch). */
export const STARTING_LOOK_MS = 1000;

/** An open notebook, as the notices see it. */
export interface IStartingNotebook {
  /** Its path on the server. */
  path: string;
  /** Whether its kernel is starting (asked for, not yet running). */
  starting: boolean;
}

/** Where the notices go (a JupyterLab notification in the page; a fake in tests). */
export interface INoticeSink {
  /** Show `notice`; returns its id. */
  show(notice: IKernelWaitNotice): string;
  update(id: string, notice: IKernelWaitNotice): void;
  dismiss(id: string): void;
}

/** The notebooks' wait notices: `start()` begins looking; what it returns stops. */
export class WaitNotices {
  constructor(
    private _poller: HostPoller,
    private _notebooks: () => IStartingNotebook[],
    private _sink: INoticeSink
  ) {}

  /** The notices shown, by notebook path: `[id, text]`. */
  get shown(): ReadonlyMap<string, readonly [string, string]> {
    return this._shown;
  }

  start(): () => void {
    const look = () => this.look();
    this._poller.changed.connect(look);
    const timer = setInterval(look, STARTING_LOOK_MS);
    look();
    return () => {
      clearInterval(timer);
      this._poller.changed.disconnect(look);
      this._poller.release(this);
      for (const [id] of this._shown.values()) {
        this._sink.dismiss(id);
      }
      this._shown.clear();
    };
  }

  /** Fetch while a kernel is starting; show, update or dismiss each notebook's notice. */
  look(): void {
    const starting = this._notebooks().filter(n => n.starting);
    if (starting.length) {
      this._poller.hold(this);
    } else {
      this._poller.release(this);
    }
    const data = this._poller.data;
    const now = new Map<string, IKernelWaitNotice>();
    for (const notebook of starting) {
      const notice = kernelWait(data, notebook.path);
      if (notice) {
        now.set(notebook.path, notice);
      }
    }
    for (const [path, [id]] of [...this._shown]) {
      if (!now.has(path)) {
        this._sink.dismiss(id);
        this._shown.delete(path);
      }
    }
    for (const [path, notice] of now) {
      const was = this._shown.get(path);
      if (!was) {
        this._shown.set(path, [this._sink.show(notice), notice.text]);
      } else if (was[1] !== notice.text) {
        this._sink.update(was[0], notice);
        this._shown.set(path, [was[0], notice.text]);
      }
    }
  }

  private _shown = new Map<string, readonly [string, string]>();
}

/** A notebook's kernel is starting: asked for (not "No Kernel"), not yet running. */
function isStarting(context: {
  isDisposed: boolean;
  hasNoKernel: boolean;
  kernelDisplayStatus: string;
  session: { kernel: unknown } | null;
}): boolean {
  return (
    !context.isDisposed &&
    !context.hasNoKernel &&
    (context.kernelDisplayStatus === 'starting' || !context.session?.kernel)
  );
}

/** Show the wait notices of the tracker's notebooks as JupyterLab notifications. */
export function startWaitNotices(poller: HostPoller, notebooks: INotebookTracker): () => void {
  const options = (notice: IKernelWaitNotice) => ({
    autoClose: false as const,
    actions: [
      {
        label: 'Shut Down Kernel',
        caption: 'Stop waiting: the kernel does not start',
        callback: () => {
          poller
            .shutdownKernel(notice.kernel)
            .catch(error =>
              console.warn(`jupyter_sched: shutting kernel ${notice.kernel} down`, error)
            );
        }
      }
    ]
  });
  const sink: INoticeSink = {
    show: notice => Notification.emit(notice.text, 'in-progress', options(notice)),
    update: (id, notice) =>
      void Notification.update({
        id,
        message: notice.text,
        type: 'in-progress',
        ...options(notice)
      }),
    dismiss: id => Notification.dismiss(id)
  };
  const open = () => {
    const found: IStartingNotebook[] = [];
    notebooks.forEach(panel =>
      found.push({ path: panel.context.path, starting: isStarting(panel.sessionContext) })
    );
    return found;
  };
  return new WaitNotices(poller, open, sink).start();
}
