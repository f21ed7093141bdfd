/**
 * The Scheduler sidebar: the kernel's notices (a banner the user dismisses), the followed
 * kernel's nodes (a bar per GPU, with who holds it: this kernel, other kernels on the host,
 * processes holding no lease), its queue (running, queued with position, expected start and
 * why it waits, held, infeasible with reason; cancel per task and cancel all; a waiting task
 * run next, held or released), the tasks that ended lately (how, when), its queues and a
 * timeline of GPU holdings. A task's name shows the cell that submitted it, when known.
 * `SidebarView` draws from props only; `SchedulerSidebar` is the widget that feeds it from a
 * `SchedConnection`, sends the commands its buttons ask for, and hands a jump to a cell to
 * whoever shows cells (`onJump`). Under it, "This host" shows the whole host as the Jupyter
 * server sees it (`HostPoller`), with no notebook open or a kernel that never loaded the
 * extension.
 */

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { LabIcon, ReactWidget } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import * as React from 'react';

import { ConnectionState, SchedConnection } from './comm';
import { HostView } from './components/host';
import { NodeList } from './components/nodes';
import { QueueTable } from './components/queues';
import { EndedList } from './components/ended';
import { TaskList } from './components/tasks';
import { HostPoller } from './hostpoll';
import { IHostViewModel } from './model/host';
import { INoticeMark, INoticeRow, pendingNotices } from './model/notices';
import { sidebarView } from './model/status';
import { elsewhereWords, statusBarText } from './model/summary';
import { Command, ISnapshotData, SteerCommand } from './schema';
import { layoutTimeline, Timeline } from './timeline';

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
  '<g class="jp-icon3" fill="#616161">' +
  '<path d="M3 4h11v3.5H3zM8 10.25h13v3.5H8zM5 16.5h9V20H5z"/></g></svg>';

/** The sidebar's icon: three bars of a Gantt chart. */
export const schedulerIcon = new LabIcon({ name: 'jupyter-sched:scheduler', svgstr: ICON_SVG });

export interface ISidebarProps {
  state: ConnectionState;
  snapshot: ISnapshotData | null;
  /** Now on the scheduler's clock, so elapsed times tick between snapshots. */
  now: number | null;
  sessionName: string;
  kernelName: string;
  error: string | null;
  /** Seconds the timeline shows (a setting). */
  timelineWindow: number;
  onCommand?: (command: Command) => void;
  /** Height of the task lists at most, in pixels. */
  listHeight?: number;
  /** The newest notice the user dismissed in this kernel (they are shown once). */
  dismissed?: INoticeMark | null;
  /** Dismiss these notices, the ones on show. */
  onDismissNotices?: (shown: INoticeRow[]) => void;
  /** The wall clock (epoch seconds) at the snapshot's `time`: ended tasks get a time of day. */
  wallTime?: number | null;
  /** Show the notebook cell with this id, which submitted a task; no jumps without it. */
  onJump?: (cell: string) => void;
  /** The whole host as the server sees it; no "This host" section when undefined. */
  host?: { view: IHostViewModel | null; error: string | null };
}

function StateLine(props: { state: ConnectionState }): JSX.Element {
  switch (props.state) {
    case 'none':
      return <p className="jp-sched-message">Open a notebook or a console to see its scheduler.</p>;
    case 'connecting':
      return <p className="jp-sched-message">Connecting to the kernel…</p>;
    case 'busy':
      return (
        <p className="jp-sched-message">
          Waiting for the kernel: it answers when the running cell ends.
        </p>
      );
    case 'restarting':
      return <p className="jp-sched-message">The kernel is restarting…</p>;
    case 'not-loaded':
      return (
        <p className="jp-sched-message jp-sched-not-loaded">
          jupyter_sched is not loaded in this kernel: run <code>%load_ext jupyter_sched</code>
        </p>
      );
    default:
      return <></>;
  }
}

function Section(props: { title: string; name: string; children: React.ReactNode }): JSX.Element {
  return (
    <details className="jp-sched-section" data-section={props.name} open>
      <summary className="jp-sched-section-title">{props.title}</summary>
      {props.children}
    </details>
  );
}

/**
 * What the kernel says the user must know (the host's lease ledger was made again, …), until
 * dismissed: an alert, so a screen reader reads it when it appears.
 */
export function NoticeBanner(props: {
  notices: INoticeRow[];
  onDismiss?: (shown: INoticeRow[]) => void;
}): JSX.Element | null {
  const { notices, onDismiss } = props;
  if (!notices.length) {
    return null;
  }
  const one = notices.length === 1;
  const label = one ? 'Dismiss the notice' : `Dismiss the ${notices.length} notices`;
  return (
    <div className="jp-sched-notices" role="alert">
      <ul className="jp-sched-notice-list">
        {notices.map(notice => (
          <li key={notice.seq} className="jp-sched-notice" data-seq={notice.seq}>
            <span className="jp-sched-notice-icon" aria-hidden="true">
              ⚠
            </span>{' '}
            {notice.timeText ? (
              <>
                <span className="jp-sched-notice-time">{notice.timeText}</span>{' '}
              </>
            ) : null}
            <span className="jp-sched-notice-text">{notice.text}</span>
          </li>
        ))}
      </ul>
      {onDismiss ? (
        <button
          type="button"
          className="jp-sched-notices-dismiss jp-mod-styled"
          aria-label={label}
          title={`${label}: ${one ? 'it is' : 'they are'} not shown again for this kernel`}
          onClick={() => onDismiss(notices)}
        >
          Dismiss
        </button>
      ) : null}
    </div>
  );
}

function LiveView(props: ISidebarProps & { snapshot: ISnapshotData }): JSX.Element {
  const { snapshot, onCommand, onJump } = props;
  const view = React.useMemo(
    () =>
      sidebarView(snapshot, { now: props.now ?? snapshot.time, wallTime: props.wallTime ?? null }),
    [snapshot, props.now, props.wallTime]
  );
  const layout = React.useMemo(
    () =>
      layoutTimeline(
        snapshot.timeline ?? [],
        Math.min(props.timelineWindow, snapshot.window || props.timelineWindow),
        props.now ?? snapshot.time,
        snapshot.nodes ?? []
      ),
    [snapshot, props.now, props.timelineWindow]
  );
  const cancel = onCommand ? (task: string) => onCommand({ command: 'cancel', task }) : undefined;
  // positions and states follow from the next snapshot: nothing is changed here meanwhile
  const steer = onCommand
    ? (command: SteerCommand, task: string) => onCommand({ command, task })
    : undefined;
  const drain = onCommand
    ? (node: string, on: boolean) => onCommand({ command: 'drain', node, on })
    : undefined;
  const setQueue = onCommand
    ? (queue: string, state: 'open' | 'closed' | 'draining') =>
        onCommand({ command: 'queue', queue, state })
    : undefined;
  return (
    <>
      <Section title="Nodes" name="nodes">
        <NodeList nodes={view.nodes} onDrain={drain} />
      </Section>
      <Section title={`Running (${view.running.rows.length + view.running.more})`} name="running">
        <TaskList
          tasks={view.running.rows}
          more={view.running.more}
          label="Running tasks"
          empty="Nothing running."
          maxHeight={props.listHeight}
          onCancel={cancel}
          onJump={onJump}
        />
      </Section>
      <Section title={`Waiting (${view.waiting.rows.length + view.waiting.more})`} name="waiting">
        <TaskList
          tasks={view.waiting.rows}
          more={view.waiting.more}
          label="Queued, held and infeasible tasks"
          empty="Nothing waiting."
          maxHeight={props.listHeight}
          onCancel={cancel}
          onSteer={steer}
          onJump={onJump}
        />
      </Section>
      {onCommand && view.cancellable > 0 ? (
        <button
          type="button"
          className="jp-sched-cancel-all jp-mod-styled jp-mod-warn"
          aria-label={`Cancel all ${view.cancellable} running and waiting tasks`}
          onClick={() => onCommand({ command: 'cancel_all' })}
        >
          Cancel all
        </button>
      ) : null}
      <Section title={`Recently ended (${view.ended.rows.length + view.ended.more})`} name="ended">
        <EndedList rows={view.ended.rows} more={view.ended.more} onJump={onJump} />
      </Section>
      <Section title="Queues" name="queues">
        <QueueTable queues={view.queues} onQueueState={setQueue} />
      </Section>
      <Section title="Timeline" name="timeline">
        <Timeline layout={layout} />
      </Section>
    </>
  );
}

/** The sidebar's content, from props only. */
export function SidebarView(props: ISidebarProps): JSX.Element {
  const { snapshot, state } = props;
  const live = state === 'live' && snapshot !== null;
  const notices = live ? pendingNotices(snapshot.notices, props.dismissed ?? null) : [];
  return (
    <div className="jp-sched-sidebar-body" data-state={state}>
      <header className="jp-sched-header">
        <h2 className="jp-sched-title">Scheduler</h2>
        {props.sessionName ? (
          <div
            className="jp-sched-session"
            title={
              props.kernelName ? `${props.sessionName} (${props.kernelName})` : props.sessionName
            }
          >
            {props.sessionName}
          </div>
        ) : null}
        {live ? (
          <div
            className="jp-sched-summary"
            title={`${statusBarText(snapshot)}.${elsewhereWords(snapshot.nodes)}`}
          >
            {statusBarText(snapshot)}
          </div>
        ) : null}
      </header>
      <NoticeBanner notices={notices} onDismiss={props.onDismissNotices} />
      {props.error ? (
        <p className="jp-sched-error" role="alert">
          {props.error}
        </p>
      ) : null}
      {live ? <LiveView {...props} snapshot={snapshot} /> : <StateLine state={state} />}
      {props.host ? (
        <Section title="This host" name="host">
          <HostView view={props.host.view} error={props.host.error} />
        </Section>
      ) : null}
    </div>
  );
}

export interface ISidebarOptions {
  connection: SchedConnection;
  timelineWindow: number;
  /** Show the notebook cell with this id in the followed kernel's notebook. */
  onJump?: (cell: string) => void;
  /** The host view from the server, fetched while the sidebar is shown. */
  host?: HostPoller;
}

/** Elapsed times tick this often while the sidebar shows running tasks. */
const TICK_MS = 1000;

export class SchedulerSidebar extends ReactWidget {
  constructor(options: ISidebarOptions) {
    super();
    this._connection = options.connection;
    this._window = options.timelineWindow;
    this._onJump = options.onJump;
    this._host = options.host ?? null;
    this._host?.changed.connect(this._refresh, this);
    this.id = 'jupyter-sched-sidebar';
    this.addClass('jp-sched-sidebar');
    this.title.icon = schedulerIcon;
    this.title.caption = 'Scheduler';
    this._connection.changed.connect(this._refresh, this);
  }

  get timelineWindow(): number {
    return this._window;
  }

  set timelineWindow(seconds: number) {
    this._window = seconds;
    this._refresh();
  }

  dispose(): void {
    this._stopTicking();
    this._connection.changed.disconnect(this._refresh, this);
    this._host?.changed.disconnect(this._refresh, this);
    this._host?.release(this);
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._stopTicking();
    this._ticker = setInterval(() => {
      // running, stopping and waiting tasks show a time that grows; the timeline slides
      const snapshot = this._connection.snapshot;
      if (snapshot?.running?.length || snapshot?.waiting?.length || snapshot?.timeline?.length) {
        this.update();
      }
    }, TICK_MS);
    this._host?.hold(this);
    this.update();
  }

  protected onBeforeHide(msg: Message): void {
    this._host?.release(this);
    this._stopTicking();
    super.onBeforeHide(msg);
  }

  protected render(): JSX.Element {
    const c = this._connection;
    return (
      <SidebarView
        state={c.state}
        snapshot={c.snapshot}
        now={c.now()}
        sessionName={c.sessionName}
        kernelName={c.kernelName}
        error={c.lastError}
        timelineWindow={this._window}
        onCommand={this._onCommand}
        dismissed={c.dismissed}
        onDismissNotices={this._onDismissNotices}
        wallTime={c.wallTime()}
        onJump={this._onJump}
        host={this._host ? { view: this._host.view, error: this._host.error } : undefined}
      />
    );
  }

  private _refresh(): void {
    // a hidden sidebar draws nothing; it catches up when shown
    if (this.isVisible) {
      this.update();
    }
  }

  private _stopTicking(): void {
    if (this._ticker !== null) {
      clearInterval(this._ticker);
      this._ticker = null;
    }
  }

  private _onDismissNotices = (shown: INoticeRow[]): void => {
    this._connection.dismissNotices(shown);
  };

  private _onCommand = async (command: Command): Promise<void> => {
    if (command.command === 'cancel_all') {
      const result = await showDialog({
        title: 'Cancel all tasks?',
        body: 'Every running and waiting task of this kernel is cancelled.',
        buttons: [
          Dialog.cancelButton({ label: 'Keep them' }),
          Dialog.warnButton({ label: 'Cancel all' })
        ]
      });
      if (!result.button.accept) {
        return;
      }
    }
    // a failed command shows as the connection's error, which redraws the sidebar
    await this._connection.send(command).catch(error => console.warn('jupyter_sched:', error));
  };

  private _connection: SchedConnection;
  private _window: number;
  private _onJump: ((cell: string) => void) | undefined;
  private _host: HostPoller | null;
  private _ticker: ReturnType<typeof setInterval> | null = null;
}
