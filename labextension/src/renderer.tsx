/**
 * The renderer for `application/vnd.jupyter-sched.v1+json` (docs/schema.md): every kind drawn
 * with the sidebar's components. A payload of another version or kind, or one this code cannot
 * draw, shows a line saying so and the bundle's `text/plain`.
 *
 * Elapsed times tick: a payload's times are on the scheduler's clock and its `time` is when it
 * was made, so "now" on that clock is `time` plus the seconds since the output arrived (the
 * sidebar estimates it the same way from its last snapshot). That holds for outputs made while
 * the page is open; a notebook opened later counts from when it was opened, since nothing in
 * the payload says when it was made on any other clock. Every kind carries its `time`; a task
 * or gang payload of an older kernel has none, and shows only the times of tasks that ended.
 * A table from `%sched` and its kin carries `as_of` (the time of day it was made): it is a
 * record of that moment, says "as of 14:02:11", and its times stay as they were then.
 *
 * A task or gang payload shows its tasks as they are now until they end, not as they were when
 * it was made: an output loaded from the saved notebook (after a browser reload, in a second
 * window) gets no more updates from its kernel, which JupyterLab routes only to the outputs it
 * saw displayed. The renderer takes each task's state from the snapshots of the kernel the
 * sidebar follows (`ILiveSnapshots`, the `SchedConnection`), when that is the kernel of the
 * notebook or console the output is in and the snapshot is newer than what the output shows;
 * a task the snapshot does not list keeps the state it had. Every other kind is a record of
 * the moment it was made.
 */

import type { ISessionContext } from '@jupyterlab/apputils';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { ReactWidget } from '@jupyterlab/ui-components';
import { Message, MessageLoop } from '@lumino/messaging';
import type { ISignal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { NodeList } from './components/nodes';
import { QueueTable } from './components/queues';
import { Elapsed, StateBadge, TaskList, TaskText } from './components/tasks';
import { followsTasks, payloadNow } from './model/live';
import { nodeRow } from './model/nodes';
import { queueRow } from './model/queues';
import { sidebarView } from './model/status';
import { statusBarText } from './model/summary';
import { taskRow, taskRows } from './model/tasks';
import {
  Counts,
  ISnapshotData,
  IStatusPayload,
  ITaskView,
  MIME_TYPE,
  Payload,
  readPayload
} from './schema';

/** Below the HTML renderer's 50, so this one is preferred for bundles that carry both. */
export const RENDERER_RANK = 0;

function Fallback(props: { problem: string; text: string }): JSX.Element {
  return (
    <div className="jp-sched-fallback">
      <p className="jp-sched-fallback-note">{props.problem}</p>
      {props.text ? <pre className="jp-sched-fallback-text">{props.text}</pre> : null}
    </div>
  );
}

/** The states of tasks that have not ended, in the order their counts are shown. */
const LIVE_STATES = ['running', 'stopping', 'pending', 'queued', 'held', 'infeasible'];

/** Counts in a fixed order, zeros left out: "2 running · 3 queued · 1 infeasible". */
function countsText(counts: Counts | undefined, states: string[]): string {
  return states
    .filter(s => (counts?.[s] ?? 0) > 0)
    .map(s => `${counts?.[s]} ${s}`)
    .join(' · ');
}

/** Tasks are never cancelled from here: a rendered payload is a record, the sidebar acts. */
function TaskCard(props: {
  task: ITaskView;
  error: string | null;
  now: number | null;
  note?: string;
}): JSX.Element {
  const row = taskRow(props.task, props.now, props.error);
  const { task } = props;
  return (
    <div className="jp-sched-task-card jp-sched-task" data-task-id={row.id} data-state={row.state}>
      <div className="jp-sched-task-line">
        <StateBadge state={row.state} />
        <Elapsed task={row} />
        <span className="jp-sched-task-label" title={row.label}>
          {row.label}
        </span>
      </div>
      <div className="jp-sched-task-detail" title={row.enforced ? row.stateTitle : undefined}>
        <TaskText parts={row.stateParts} />
      </div>
      <div className="jp-sched-task-detail">
        needs {row.needs} · queue {row.queue}
        {task.gang ? ` · gang ${task.gang} rank ${task.rank ?? '?'}` : ''}
      </div>
      {props.error ? <pre className="jp-sched-task-error">{props.error}</pre> : null}
      <Note note={props.note} />
    </div>
  );
}

/** What a status line adds about its task or gang, when it says something. */
function Note(props: { note?: unknown }): JSX.Element | null {
  return typeof props.note === 'string' && props.note ? (
    <div className="jp-sched-task-note">{props.note}</div>
  ) : null;
}

function StatusView(props: { status: IStatusPayload; now: number | null }): JSX.Element {
  const view = sidebarView(props.status, { now: props.now ?? undefined });
  return (
    <>
      <div className="jp-sched-summary">{statusBarText(props.status)}</div>
      <NodeList nodes={view.nodes} />
      <TaskList
        flow
        tasks={view.running.rows}
        more={view.running.more}
        label="Running tasks"
        empty="Nothing running."
      />
      <TaskList
        flow
        tasks={view.waiting.rows}
        more={view.waiting.more}
        label="Waiting tasks"
        empty="Nothing waiting."
      />
      <QueueTable queues={view.queues} />
    </>
  );
}

function KindView(props: { payload: Payload; now: number | null }): JSX.Element {
  const p = props.payload;
  const now = props.now ?? payloadTime(p);
  switch (p.kind) {
    case 'task':
      return <TaskCard task={p.task} error={p.error} now={now} note={p.note} />;
    case 'gang': {
      const tasks = p.tasks ?? [];
      return (
        <>
          <div className="jp-sched-summary">
            gang {p.name}: {tasks.length} member{tasks.length === 1 ? '' : 's'}
          </div>
          {p.error ? <pre className="jp-sched-task-error">{p.error}</pre> : null}
          <Note note={p.note} />
          <TaskList
            flow
            tasks={taskRows(tasks, now)}
            more={0}
            label={`Members of gang ${p.name}`}
            empty="No members."
          />
        </>
      );
    }
    case 'status':
      return <StatusView status={p} now={now} />;
    case 'nodes':
      return <NodeList nodes={(p.nodes ?? []).map(node => nodeRow(node))} />;
    case 'queue': {
      const view = sidebarView(
        { ...p, kind: 'status', gpu: { allocated: 0, total: 0 }, nodes: [], queues: [] },
        { now: now ?? undefined }
      );
      return (
        <>
          <div className="jp-sched-summary">{countsText(p.counts, LIVE_STATES) || 'No tasks.'}</div>
          <TaskList
            flow
            tasks={view.running.rows}
            more={view.running.more}
            label="Running tasks"
            empty="Nothing running."
          />
          <TaskList
            flow
            tasks={view.waiting.rows}
            more={view.waiting.more}
            label="Waiting tasks"
            empty="Nothing waiting."
          />
        </>
      );
    }
    case 'history': {
      const rows = taskRows(p.history ?? [], null);
      const total = ['done', 'failed', 'cancelled'].reduce((n, s) => n + (p.counts?.[s] ?? 0), 0);
      return (
        <>
          <div className="jp-sched-summary">
            {countsText(p.counts, ['done', 'failed', 'cancelled']) || 'No history.'}
          </div>
          <TaskList
            flow
            tasks={rows}
            more={Math.max(0, total - rows.length)}
            label="Finished tasks"
            empty="No finished tasks."
          />
        </>
      );
    }
    case 'queues':
      return <QueueTable queues={(p.queues ?? []).map(queueRow)} />;
  }
}

/** Drawing a payload with fields of unexpected types throws; then the plain text shows. */
class Guard extends React.Component<
  { text: string; children: React.ReactNode },
  { failed: string | null }
> {
  state = { failed: null as string | null };

  static getDerivedStateFromError(error: Error): { failed: string } {
    return { failed: String(error?.message ?? error) };
  }

  render(): React.ReactNode {
    if (this.state.failed !== null) {
      return (
        <Fallback
          problem={`This jupyter_sched payload could not be drawn (${this.state.failed}); showing the plain text`}
          text={this.props.text}
        />
      );
    }
    return this.props.children;
  }
}

/** The payload's `time` (scheduler clock), for the kinds and kernels that send one. */
function payloadTime(payload: unknown): number | null {
  const time = (payload as { time?: unknown } | null)?.time;
  return typeof time === 'number' && Number.isFinite(time) ? time : null;
}

/** The time of day a table was made (`as_of`), when it is a record of that moment. */
function asOf(payload: unknown): string | null {
  const said = (payload as { as_of?: unknown } | null)?.as_of;
  return typeof said === 'string' && said ? said : null;
}

/**
 * Whether a payload shows a time that grows: a task that has not ended, and a clock, in a
 * payload that is not a record of its moment (`as_of`).
 */
export function ticks(data: unknown): boolean {
  if (payloadTime(data) === null || asOf(data) !== null) {
    return false;
  }
  const p = data as { [list: string]: unknown };
  const lists = [p.running, p.waiting, p.tasks, [p.task]];
  const open = (t: unknown) => !!t && (t as ITaskView).ended === null;
  return lists.some(list => Array.isArray(list) && list.some(open));
}

/**
 * A payload, or the plain text with a line saying why the payload is not drawn. `now` is the
 * scheduler's clock now (elapsed times count up to it); the payload's own `time` if absent.
 */
export function PayloadView(props: {
  data: unknown;
  text: string;
  now?: number | null;
}): JSX.Element {
  const payload = readPayload(props.data);
  if ('problem' in payload) {
    return <Fallback problem={payload.problem} text={props.text} />;
  }
  const said = asOf(payload);
  return (
    <div className="jp-sched-payload" data-kind={payload.kind}>
      {said ? <div className="jp-sched-as-of">as of {said}</div> : null}
      <Guard text={props.text}>
        <KindView payload={payload} now={said ? null : (props.now ?? null)} />
      </Guard>
    </div>
  );
}

/** Elapsed times tick this often while a rendered payload shows one. */
const TICK_MS = 1000;

/**
 * The snapshots of the kernel the sidebar follows, which tasks' states are read from now
 * (`SchedConnection` is one).
 */
export interface ILiveSnapshots {
  /** Emitted when the snapshot, or the kernel followed, may have changed. */
  readonly changed: ISignal<unknown, void>;
  /** The last snapshot while it is of the kernel with this id and live; else null. */
  snapshotOf(kernelId: string): ISnapshotData | null;
  /** Now on the scheduler's clock of that snapshot. */
  now(): number | null;
}

/** The id of the kernel of the notebook or console a widget is in, or null. */
export function kernelIdOf(widget: Widget): string | null {
  for (let parent = widget.parent; parent; parent = parent.parent) {
    const context = (parent as Partial<{ sessionContext: ISessionContext }>).sessionContext;
    if (context) {
      return context.session?.kernel?.id ?? null;
    }
  }
  return null;
}

/** The renderer widget JupyterLab puts in an output area. */
export class RenderedSched extends ReactWidget implements IRenderMime.IRenderer {
  /** `live`: where tasks' states are read from now; none, and payloads show what they say. */
  constructor(options: IRenderMime.IRendererOptions, live: ILiveSnapshots | null = null) {
    super();
    this._mimeType = options.mimeType;
    this._live = live;
    this.addClass('jp-sched-rendered');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this._data = model.data[this._mimeType];
    const text = model.data['text/plain'];
    this._text = typeof text === 'string' ? text : Array.isArray(text) ? text.join('') : '';
    this._receivedAt = Date.now();
    this._watch();
    MessageLoop.sendMessage(this, Widget.Msg.UpdateRequest);
    this._tickIfNeeded();
    await this.renderPromise;
  }

  /**
   * Now on the payload's clock: its `time` plus the seconds since it arrived; a record of its
   * moment (`as_of`) stays at its `time`.
   */
  now(): number | null {
    const time = payloadTime(this._data);
    if (time === null || asOf(this._data) !== null) {
      return time;
    }
    return time + (Date.now() - this._receivedAt) / 1000;
  }

  dispose(): void {
    this._stopTicking();
    this._unwatch();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._watch();
    this._tickIfNeeded();
  }

  protected onBeforeDetach(msg: Message): void {
    this._stopTicking();
    this._unwatch();
    super.onBeforeDetach(msg);
  }

  protected render(): JSX.Element {
    return <PayloadView data={this._data} text={this._text} now={this.now()} />;
  }

  /** A clock for an attached payload with a time that grows; none for the others. */
  private _tickIfNeeded(): void {
    this._stopTicking();
    if (!this.isAttached || !ticks(this._data)) {
      return;
    }
    this._ticker = setInterval(() => {
      // an output in a hidden tab is not drawn; it catches up at the first tick once shown
      if (this.isVisible) {
        this.update();
      }
    }, TICK_MS);
  }

  private _stopTicking(): void {
    if (this._ticker !== null) {
      clearInterval(this._ticker);
      this._ticker = null;
    }
  }

  /** Follow the live snapshots while attached and showing tasks that have not ended. */
  private _watch(): void {
    if (!this._live || !this.isAttached || !this._follows()) {
      this._unwatch();
      return;
    }
    if (!this._watching) {
      this._watching = true;
      this._live.changed.connect(this._onLive, this);
    }
    this._onLive();
  }

  private _unwatch(): void {
    if (this._watching) {
      this._watching = false;
      this._live?.changed.disconnect(this._onLive, this);
    }
  }

  private _onLive(): void {
    if (this._catchUp()) {
      this.update();
      this._tickIfNeeded();
    }
    if (!this._follows()) {
      this._unwatch(); // its tasks ended: what it shows is final
    }
  }

  private _follows(): boolean {
    const payload = readPayload(this._data);
    return !('problem' in payload) && followsTasks(payload);
  }

  /**
   * Show the tasks as the live snapshot of this output's kernel says they are now, when it is
   * newer than what is shown and says something of them. True when it did.
   */
  private _catchUp(): boolean {
    const live = this._live;
    const kernel = live ? kernelIdOf(this) : null;
    const snapshot = live && kernel ? live.snapshotOf(kernel) : null;
    const payload = readPayload(this._data);
    if (!live || !snapshot || 'problem' in payload) {
      return false;
    }
    const now = payloadNow(payload, snapshot);
    if (!now) {
      return false;
    }
    this._data = now;
    // its times count on from the snapshot's, as the sidebar's do
    const clock = live.now() ?? snapshot.time;
    this._receivedAt = Date.now() - Math.max(0, clock - snapshot.time) * 1000;
    return true;
  }

  private _mimeType: string;
  private _live: ILiveSnapshots | null;
  private _watching = false;
  private _data: unknown = null;
  private _text = '';
  private _receivedAt = 0;
  private _ticker: ReturnType<typeof setInterval> | null = null;
}

/** The renderer's factory; with `live`, task and gang payloads show their tasks as they are now. */
export function createRendererFactory(
  live: ILiveSnapshots | null = null
): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [MIME_TYPE],
    defaultRank: RENDERER_RANK,
    createRenderer: options => new RenderedSched(options, live)
  };
}

/** Payloads as they say, with no kernel to follow. */
export const rendererFactory = createRendererFactory();
