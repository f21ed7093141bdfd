/**
 * The connection to the scheduler in one kernel: the comm `jupyter_sched` (docs/comm.md).
 *
 * A `SchedConnection` follows one session (the active notebook's or console's); when the
 * session's kernel changes or restarts it drops what it knew and opens a new comm. It holds
 * at most one comm of its own and the last snapshot that came on it. A kernel that has not
 * loaded the extension answers the comm's opening with a close (ipykernel) or says nothing;
 * then the state is `not-loaded`, and the next cell that runs in that kernel (it may be
 * `%load_ext jupyter_sched`) brings one more try. Nothing polls.
 *
 * It also remembers, per kernel, the newest notice the user dismissed, so that following
 * another notebook and coming back does not show them again.
 */

import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, KernelMessage as KM } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { dismissMark, INoticeMark } from './model/notices';
import {
  COMM_TARGET,
  COMM_VERSION,
  Command,
  IReplyMessage,
  ISnapshotData,
  KernelMessage,
  readEnvelope
} from './schema';

export type ConnectionState =
  /** No notebook or console is followed, or it has no kernel. */
  | 'none'
  /** The comm is open and no snapshot came yet. */
  | 'connecting'
  /** No answer yet and the kernel is busy: it reads the comm when the running cell ends. */
  | 'busy'
  | 'live'
  /** The kernel has not loaded the extension (`%load_ext jupyter_sched`). */
  | 'not-loaded'
  | 'restarting';

/** How long an open comm may go unanswered by an idle kernel before `not-loaded`. */
export const NOT_LOADED_AFTER_MS = 3000;
/** How long a command waits for its reply. */
export const REPLY_TIMEOUT_MS = 10000;
/** Retries after cells that ran are at least this far apart. */
export const RETRY_SPACING_MS = 1000;

export interface ISubscription {
  /** Seconds between snapshots at most (the refresh-rate setting), ≥ 0.25. */
  interval: number;
  /** Seconds of history the timeline should cover. */
  window: number;
}

interface IPending {
  resolve: (reply: IReplyMessage) => void;
  reject: (error: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

type KernelChange = { newValue: Kernel.IKernelConnection | null };

export class SchedConnection {
  constructor(subscription: ISubscription) {
    this._subscription = { ...subscription };
  }

  /** Emitted when the state, the snapshot or the last error changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get state(): ConnectionState {
    return this._state;
  }

  /** The last snapshot, while `live`. */
  get snapshot(): ISnapshotData | null {
    return this._snapshot;
  }

  /**
   * The last snapshot while `live`, if the kernel followed is the one with this id (the
   * renderer reads the state of its tasks from it); else null.
   */
  snapshotOf(kernelId: string): ISnapshotData | null {
    return this._state === 'live' && this._kernel?.id === kernelId ? this._snapshot : null;
  }

  /** The last error the kernel reported, or the last command that failed. */
  get lastError(): string | null {
    return this._lastError;
  }

  /** The newest notice dismissed in the followed kernel, or null. */
  get dismissed(): INoticeMark | null {
    const id = this._kernel?.id;
    return id === undefined ? null : (this._dismissed.get(id) ?? null);
  }

  /**
   * Dismiss notices (those shown; all of the last snapshot's when not said): they are not
   * shown again for this kernel, nor are older ones.
   */
  dismissNotices(shown?: ReadonlyArray<{ seq: number; time: number }>): void {
    const id = this._kernel?.id;
    if (id === undefined || !this._snapshot) {
      return;
    }
    const mark = dismissMark(shown ?? this._snapshot.notices, this.dismissed);
    if (mark) {
      this._dismissed.set(id, mark);
      this._changed.emit();
    }
  }

  /** The followed session's name (a notebook's or console's), for headings. */
  get sessionName(): string {
    return this._context?.name ?? '';
  }

  get kernelName(): string {
    return this._context?.kernelDisplayName ?? '';
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Now on the scheduler's clock, from the last snapshot and the time since it came. */
  now(): number | null {
    if (!this._snapshot) {
      return null;
    }
    return this._snapshot.time + (Date.now() - this._receivedAt) / 1000;
  }

  /**
   * The wall clock (epoch seconds) when the last snapshot came, taken as its `time`'s: ended
   * tasks get a time of day on this computer's clock. Null without a snapshot.
   */
  wallTime(): number | null {
    return this._snapshot ? this._receivedAt / 1000 : null;
  }

  /** The id of the kernel followed, or null. */
  get kernelId(): string | null {
    return this._kernel?.id ?? null;
  }

  /** Follow another session (null: none). Following the same one again does nothing. */
  follow(context: ISessionContext | null): void {
    if (context === this._context || this._disposed) {
      return;
    }
    this._context?.kernelChanged.disconnect(this._onKernelChanged, this);
    this._context = context;
    context?.kernelChanged.connect(this._onKernelChanged, this);
    this._attach(context?.session?.kernel ?? null, true);
  }

  /** Change the refresh rate or the timeline window; tells the kernel when connected. */
  subscribe(subscription: ISubscription): void {
    this._subscription = { ...subscription };
    if (this._comm && this._state === 'live') {
      this.send({ command: 'subscribe', ...this._subscription }).catch(() => undefined);
    }
  }

  /** Send a command; resolves with the kernel's reply (which may say `ok: false`). */
  send(command: Command): Promise<IReplyMessage> {
    const comm = this._comm;
    if (!comm || comm.isDisposed) {
      const error = new Error('jupyter_sched is not connected to this kernel');
      this._setError(error.message);
      return Promise.reject(error);
    }
    const id = this._newId();
    const reply = this._expect(id);
    comm.send({ v: COMM_VERSION, kind: 'command', id, ...command });
    return reply.then(
      r => {
        this._setError(r.ok ? null : (r.error ?? `${command.command} failed`));
        return r;
      },
      (error: Error) => {
        this._setError(error.message);
        throw error;
      }
    );
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this.follow(null);
    this._disposed = true;
    Signal.clearData(this);
  }

  // -- the kernel -------------------------------------------------------------------------------

  private _onKernelChanged(_: unknown, change: KernelChange): void {
    this._attach(change.newValue, true);
  }

  private _attach(kernel: Kernel.IKernelConnection | null, open: boolean): void {
    if (kernel === this._kernel) {
      return;
    }
    const old = this._kernel;
    if (old && !old.isDisposed) {
      old.removeCommTarget(COMM_TARGET, this._onKernelOpened);
      old.statusChanged.disconnect(this._onStatus, this);
      old.iopubMessage.disconnect(this._onIopub, this);
      old.connectionStatusChanged.disconnect(this._onConnection, this);
    }
    this._closeComm(true);
    this._kernel = kernel;
    // the last kernel's snapshot is gone: never `live` without one (the status bar would show
    // the item with no text), and say so now, not when the new kernel answers
    this._snapshot = null;
    this._setState(kernel ? 'connecting' : 'none');
    if (!kernel) {
      return;
    }
    kernel.registerCommTarget(COMM_TARGET, this._onKernelOpened);
    kernel.statusChanged.connect(this._onStatus, this);
    kernel.iopubMessage.connect(this._onIopub, this);
    kernel.connectionStatusChanged.connect(this._onConnection, this);
    if (open) {
      this._open();
    }
  }

  private _onStatus(kernel: Kernel.IKernelConnection, status: KM.Status): void {
    if (kernel !== this._kernel) {
      return;
    }
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      // the kernel's comms are gone with it; JupyterLab disposes ours without a close
      this._closeComm(false);
      this._snapshot = null;
      this._reopen = true;
      this._setState(status === 'dead' ? 'none' : 'restarting');
    } else if (status === 'idle' && this._reopen) {
      this._reopen = false;
      this._open();
    }
  }

  private _onIopub(kernel: Kernel.IKernelConnection, msg: KM.IIOPubMessage): void {
    if (kernel !== this._kernel) {
      return;
    }
    const parent = msg.parent_header as Partial<KM.IHeader>;
    if (msg.header.msg_type === 'execute_input') {
      // code that names the extension (`%load_ext jupyter_sched`) may load it: try again as
      // soon as it has run, however soon after the last try
      const code = String((msg as KM.IExecuteInputMsg).content.code ?? '');
      if (this._state === 'not-loaded' && parent.msg_id && code.includes('jupyter_sched')) {
        this._hinted = parent.msg_id;
      }
      return;
    }
    if (msg.header.msg_type !== 'status') {
      return;
    }
    if ((msg as KM.IStatusMsg).content.execution_state !== 'idle') {
      return;
    }
    if (parent.msg_id && parent.msg_id === this._openMsgId) {
      // the kernel is done with our comm_open: a kernel with the extension has answered it
      this._openMsgId = null;
      if (!this._answered) {
        this._notLoaded();
      }
    } else if (
      parent.msg_type === 'execute_request' &&
      this._state === 'not-loaded' &&
      (parent.msg_id === this._hinted || Date.now() - this._lastAttempt >= RETRY_SPACING_MS)
    ) {
      this._hinted = null;
      this._open();
    }
  }

  private _onConnection(kernel: Kernel.IKernelConnection, status: Kernel.ConnectionStatus): void {
    // snapshots sent while the websocket was down are lost: ask for a full one
    if (kernel === this._kernel && status === 'connected' && this._state === 'live') {
      this.send({ command: 'snapshot' }).catch(() => undefined);
    }
  }

  /** A kernel of an earlier version opened a comm on `%load_ext`: answer by opening our own,
   * close its one. (Kernels now open none: a client without this extension, nbclient say,
   * would warn of an unknown target; this extension opens its comm after the load instead.) */
  private _onKernelOpened = (comm: Kernel.IComm, msg: KM.ICommOpenMsg): void => {
    if (this._kernel && !this._kernel.isDisposed && this._state !== 'live') {
      const envelope = readEnvelope(msg.content.data);
      if (envelope?.kind === 'snapshot') {
        this._takeSnapshot(envelope.data);
      }
      this._closeComm(true);
      this._open();
    }
    // every client of the kernel receives this comm_open: each one uses a comm of its own
    comm.close();
  };

  // -- our comm ---------------------------------------------------------------------------------

  private _open(): void {
    const kernel = this._kernel;
    if (!kernel || kernel.isDisposed || this._comm) {
      return;
    }
    this._lastAttempt = Date.now();
    this._answered = false;
    this._lastSeq = -1;
    let comm: Kernel.IComm;
    try {
      comm = kernel.createComm(COMM_TARGET);
    } catch (error) {
      this._setState('none');
      return;
    }
    this._comm = comm;
    comm.onMsg = msg => this._onCommMsg(comm, msg);
    comm.onClose = () => this._onCommClose(comm);
    const id = this._newId();
    this._expect(id).then(
      () => undefined,
      () => undefined
    );
    const future = comm.open({
      v: COMM_VERSION,
      kind: 'command',
      id,
      command: 'subscribe',
      ...this._subscription
    });
    this._openMsgId = future?.msg?.header?.msg_id ?? null;
    if (this._state !== 'live') {
      this._setState('connecting');
    }
    this._clearTimer();
    this._timer = setTimeout(() => this._unanswered(comm), NOT_LOADED_AFTER_MS);
  }

  private _unanswered(comm: Kernel.IComm): void {
    this._timer = null;
    if (comm !== this._comm || this._answered) {
      return;
    }
    if (this._kernel?.status === 'idle') {
      this._notLoaded();
    } else {
      this._setState('busy');
    }
  }

  private _notLoaded(): void {
    this._closeComm(true);
    this._snapshot = null;
    this._setState('not-loaded');
  }

  private _onCommMsg(comm: Kernel.IComm, msg: KM.ICommMsgMsg): void {
    if (comm !== this._comm) {
      return;
    }
    const envelope: KernelMessage | null = readEnvelope(msg.content.data);
    if (!envelope) {
      return; // a newer kernel's message kind: ignored, as the protocol says
    }
    this._answered = true;
    if (envelope.kind === 'snapshot') {
      if (envelope.seq > this._lastSeq) {
        this._lastSeq = envelope.seq;
        this._clearTimer();
        this._takeSnapshot(envelope.data);
      }
    } else if (envelope.kind === 'reply') {
      const pending = this._pending.get(envelope.id);
      if (pending) {
        this._pending.delete(envelope.id);
        clearTimeout(pending.timer);
        pending.resolve(envelope);
      }
    } else {
      this._setError(envelope.error);
    }
  }

  private _onCommClose(comm: Kernel.IComm): void {
    if (comm !== this._comm) {
      return;
    }
    // the kernel closed it: no such target (not loaded), or the extension was unloaded
    this._comm = null;
    this._notLoaded();
  }

  private _takeSnapshot(data: ISnapshotData): void {
    this._snapshot = data;
    this._receivedAt = Date.now();
    this._state = 'live';
    this._changed.emit();
  }

  private _closeComm(sendClose: boolean): void {
    this._clearTimer();
    this._openMsgId = null;
    const comm = this._comm;
    this._comm = null;
    if (comm && !comm.isDisposed && sendClose && this._kernel && !this._kernel.isDisposed) {
      try {
        comm.close();
      } catch {
        // the kernel went away first; nothing is left to close
      }
    }
    for (const [id, pending] of this._pending) {
      clearTimeout(pending.timer);
      pending.reject(new Error('the comm to the kernel was closed'));
      this._pending.delete(id);
    }
  }

  private _expect(id: string): Promise<IReplyMessage> {
    return new Promise<IReplyMessage>((resolve, reject) => {
      const timer = setTimeout(() => {
        this._pending.delete(id);
        reject(
          new Error(`no reply from the kernel to command ${id} within ${REPLY_TIMEOUT_MS / 1000} s`)
        );
      }, REPLY_TIMEOUT_MS);
      this._pending.set(id, { resolve, reject, timer });
    });
  }

  private _newId(): string {
    this._nextId += 1;
    return `c${this._nextId}`;
  }

  private _clearTimer(): void {
    if (this._timer !== null) {
      clearTimeout(this._timer);
      this._timer = null;
    }
  }

  private _setState(state: ConnectionState): void {
    if (state !== this._state) {
      this._state = state;
      this._changed.emit();
    }
  }

  private _setError(error: string | null): void {
    if (error !== this._lastError) {
      this._lastError = error;
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _context: ISessionContext | null = null;
  private _kernel: Kernel.IKernelConnection | null = null;
  private _comm: Kernel.IComm | null = null;
  private _state: ConnectionState = 'none';
  private _snapshot: ISnapshotData | null = null;
  private _receivedAt = 0;
  private _lastSeq = -1;
  private _answered = false;
  private _openMsgId: string | null = null;
  private _reopen = false;
  private _lastAttempt = 0;
  /** The request whose code named the extension, while it is not loaded: tried after it. */
  private _hinted: string | null = null;
  private _timer: ReturnType<typeof setTimeout> | null = null;
  private _pending = new Map<string, IPending>();
  /** Kernel id → the newest notice dismissed in it (which come later: model/notices.ts). */
  private _dismissed = new Map<string, INoticeMark>();
  private _nextId = 0;
  private _lastError: string | null = null;
  private _subscription: ISubscription;
  private _disposed = false;
}
