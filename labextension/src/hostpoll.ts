/**
 * Fetches the host view from the Jupyter server (`GET api/sched/host`, the server extension)
 * every few seconds while someone shows it: the sidebar's "This host" and the Running panel's
 * "GPU leases". It needs no kernel. Shutting a kernel down goes through the server's kernels
 * REST API.
 */

import { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { hostView, IHostData, IHostViewModel, readHost } from './model/host';

/** How often the host view is fetched while shown. */
export const HOST_POLL_MS = 5000;

export class HostPoller {
  constructor(settings?: ServerConnection.ISettings, every = HOST_POLL_MS) {
    this._settings = settings ?? ServerConnection.makeSettings();
    this._every = every;
  }

  /** Emitted after each fetch, with or without news. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get view(): IHostViewModel | null {
    return this._view;
  }

  /** The last host view read, as the server sent it. */
  get data(): IHostData | null {
    return this._data;
  }

  get error(): string | null {
    return this._error;
  }

  /** Start fetching for `who` (until `release(who)`); the first fetch is now. */
  hold(who: object): void {
    this._holders.add(who);
    if (this._timer === null) {
      void this.refresh();
      this._timer = setInterval(() => void this.refresh(), this._every);
    }
  }

  release(who: object): void {
    this._holders.delete(who);
    if (!this._holders.size && this._timer !== null) {
      clearInterval(this._timer);
      this._timer = null;
    }
  }

  async refresh(): Promise<void> {
    const url = this._url('api/sched/host');
    try {
      const response = await ServerConnection.makeRequest(url, {}, this._settings);
      if (!response.ok) {
        this._error =
          response.status === 404
            ? 'This server has no jupyter_sched server extension.'
            : `The server answered ${response.status} for the host view.`;
      } else {
        const data = readHost(await response.json());
        this._error = data ? null : 'The server sent a host view of another version.';
        this._view = data ? hostView(data) : this._view;
        this._data = data ?? this._data;
      }
    } catch (error) {
      this._error = `Cannot reach the server: ${String(error)}`;
    }
    this._changed.emit();
  }

  /** Shut down a kernel of this server (one of the user's own leases). */
  async shutdownKernel(kernel: string): Promise<void> {
    const url = this._url(`api/kernels/${encodeURIComponent(kernel)}`);
    const response = await ServerConnection.makeRequest(url, { method: 'DELETE' }, this._settings);
    if (!response.ok && response.status !== 404) {
      throw new Error(`shutting kernel ${kernel} down: the server answered ${response.status}`);
    }
    await this.refresh();
  }

  dispose(): void {
    this._holders.clear();
    this.release(this);
    Signal.clearData(this);
  }

  private _url(path: string): string {
    const base = this._settings.baseUrl;
    return (base.endsWith('/') ? base : base + '/') + path;
  }

  private _settings: ServerConnection.ISettings;
  private _every: number;
  private _view: IHostViewModel | null = null;
  private _data: IHostData | null = null;
  private _error: string | null = null;
  private _holders = new Set<object>();
  private _timer: ReturnType<typeof setInterval> | null = null;
  private _changed = new Signal<this, void>(this);
}
