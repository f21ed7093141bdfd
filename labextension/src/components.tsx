/**
 * The pieces the sidebar and the renderer share: a task's state, a GPU's share bar, a node,
 * a list of tasks (windowed, so thousands of rows cost a screenful of elements) and the queues.
 *
 * Every string from the kernel is a React text node or an attribute value, never markup.
 */

import * as React from 'react';

import { IGpuBar, INodeRow, IQueueRow, ITaskRow, ITextPart } from './model';
import { SteerCommand } from './schema';

const STATE_ICONS: { [state: string]: string } = {
  pending: '○',
  queued: '◷',
  held: '‖',
  infeasible: '⚠',
  running: '▶',
  stopping: '■',
  done: '✓',
  failed: '✗',
  cancelled: '⊘'
};

/** A state with its icon; the colour comes from `data-state` in the style sheet. */
export function StateBadge(props: { state: string }): JSX.Element {
  const icon = STATE_ICONS[props.state] ?? '•';
  return (
    <span className="jp-sched-state" data-state={props.state}>
      <span className="jp-sched-state-icon" aria-hidden="true">
        {icon}
      </span>
      {props.state}
    </span>
  );
}

/** Who holds a GPU, one line each, under its bar; a line that does not fit ends in "…". */
export function HolderList(props: { bar: IGpuBar }): JSX.Element | null {
  const { bar } = props;
  if (!bar.holders.length) {
    return null;
  }
  return (
    <ul className="jp-sched-holders" aria-label={`Holders of ${bar.node} ${bar.label}`}>
      {bar.holders.map((holder, i) => (
        <li
          key={`${holder.kind}-${holder.pid ?? 'mine'}-${i}`}
          className="jp-sched-holder"
          data-holder={holder.kind}
          data-pid={holder.pid ?? undefined}
          data-share={holder.share ?? undefined}
          title={holder.title}
        >
          <span className="jp-sched-holder-share">{holder.shareText}</span>{' '}
          <span className="jp-sched-holder-text">{holder.text}</span>
        </li>
      ))}
      {bar.moreHolders > 0 ? (
        <li className="jp-sched-holder jp-sched-more" data-holder="more">
          and {bar.moreHolders} more
        </li>
      ) : null}
    </ul>
  );
}

/**
 * One GPU: the share allocated as a bar, live use beside it where NVML gives it, and who
 * holds it. This kernel's part of the bar is solid; other kernels' part is hatched, and what
 * is reserved for other kernels' waits (or used outside the scheduler) is dotted, so the
 * three differ without colour too.
 */
export function GpuBar(props: { bar: IGpuBar }): JSX.Element {
  const { bar } = props;
  const percent = (share: number) => `${Math.round(share * 1000) / 10}%`;
  const label = `${bar.node} ${bar.label}${bar.model ? ` (${bar.model})` : ''}`;
  return (
    <div
      className="jp-sched-gpu-bar"
      data-node={bar.node}
      data-device={bar.index}
      data-share={bar.share}
      data-others={bar.others}
      data-declared={bar.declared ? 'true' : 'false'}
      title={`${label}: ${bar.text}`}
    >
      <span className="jp-sched-gpu-label">{bar.label}</span>
      <span
        className="jp-sched-gpu-track"
        role="meter"
        aria-label={`${label} allocated`}
        aria-valuemin={0}
        aria-valuemax={1}
        aria-valuenow={bar.share}
        aria-valuetext={bar.meterText}
      >
        {bar.segments.map(part => (
          <span
            key={part.kind}
            className="jp-sched-gpu-fill"
            data-holder={part.kind}
            title={part.title}
            style={{ left: percent(part.from), width: percent(part.width) }}
          />
        ))}
        {bar.utilization !== null ? (
          <span
            className="jp-sched-gpu-use"
            style={{ width: `${Math.min(100, Math.max(0, bar.utilization))}%` }}
          />
        ) : null}
      </span>
      <span className="jp-sched-gpu-text">{bar.text}</span>
      {bar.declared ? <span className="jp-sched-declared">declared</span> : null}
      <HolderList bar={bar} />
    </div>
  );
}

export interface INodeActions {
  onDrain?: (node: string, on: boolean) => void;
}

export function NodeCard(props: { node: INodeRow } & INodeActions): JSX.Element {
  const { node, onDrain } = props;
  return (
    <div
      className="jp-sched-node"
      data-node={node.name}
      data-drained={node.drained ? 'true' : 'false'}
    >
      <div className="jp-sched-node-head">
        <span className="jp-sched-node-name" title={node.name}>
          {node.name}
        </span>
        <span className="jp-sched-node-kind">{node.kind}</span>
        <span className="jp-sched-node-state" data-state={node.stateText}>
          {node.stateText}
        </span>
        <span className="jp-sched-node-running">{node.running} running</span>
        {onDrain ? (
          <button
            type="button"
            className="jp-sched-drain jp-mod-styled"
            aria-label={`${node.drained ? 'Undrain' : 'Drain'} node ${node.name}`}
            onClick={() => onDrain(node.name, !node.drained)}
          >
            {node.drained ? 'Undrain' : 'Drain'}
          </button>
        ) : null}
      </div>
      {node.freeParts.length ? (
        <div className="jp-sched-node-free" title={node.freeText}>
          {node.freeParts.map((part, i) => (
            // a line breaks between the parts, never inside one ("memory 8 GiB/8 GiB free")
            <React.Fragment key={i}>
              {i ? ' · ' : null}
              <span className="jp-sched-node-free-part">{part}</span>
            </React.Fragment>
          ))}
        </div>
      ) : null}
      {node.labelsText ? (
        <div className="jp-sched-node-labels" title={node.labelsText}>
          {node.labelsText}
        </div>
      ) : null}
      {node.gpus.map(bar => (
        <GpuBar key={bar.index} bar={bar} />
      ))}
    </div>
  );
}

export function NodeList(props: { nodes: INodeRow[] } & INodeActions): JSX.Element {
  if (!props.nodes.length) {
    return <div className="jp-sched-empty">No nodes.</div>;
  }
  return (
    <div className="jp-sched-nodes">
      {props.nodes.map(node => (
        <NodeCard key={node.name} node={node} onDrain={props.onDrain} />
      ))}
    </div>
  );
}

// -- lists of tasks -----------------------------------------------------------------------------

/**
 * Height of one task row in pixels: fixed, so the list can window its rows. A row has three
 * lines (name and Cancel; state, position, time and demand; where or why, and a waiting
 * task's Run next and Hold), each one line high whatever the width: long text ends in an
 * ellipsis and shows whole in its tooltip. The buttons that steer a task share the last line,
 * so that its name keeps the width of the first.
 */
export const ROW_HEIGHT = 66;

export interface IVirtualListProps<T> {
  items: ReadonlyArray<T>;
  rowHeight: number;
  /** The list's height at most, in pixels; longer lists scroll and draw only what shows. */
  maxHeight: number;
  label: string;
  itemKey: (item: T) => string;
  renderItem: (item: T) => JSX.Element;
  overscan?: number;
}

/** A list that draws the rows in view (plus a few), however many items it has. */
export function VirtualList<T>(props: IVirtualListProps<T>): JSX.Element {
  const { items, rowHeight, maxHeight } = props;
  const [scrollTop, setScrollTop] = React.useState(0);
  const total = items.length * rowHeight;
  const height = Math.min(total, maxHeight);
  const overscan = props.overscan ?? 5;
  const first = Math.max(0, Math.floor(scrollTop / rowHeight) - overscan);
  const last = Math.min(items.length, Math.ceil((scrollTop + height) / rowHeight) + overscan);
  const rows: JSX.Element[] = [];
  for (let i = first; i < last; i++) {
    const item = items[i];
    rows.push(
      <div
        key={props.itemKey(item)}
        role="listitem"
        className="jp-sched-list-item"
        style={{ top: i * rowHeight, height: rowHeight }}
      >
        {props.renderItem(item)}
      </div>
    );
  }
  return (
    <div
      className="jp-sched-list"
      role="list"
      aria-label={props.label}
      data-count={items.length}
      style={{ height, maxHeight }}
      onScroll={event => setScrollTop(event.currentTarget.scrollTop)}
    >
      <div className="jp-sched-list-inner" style={{ height: total }}>
        {rows}
      </div>
    </div>
  );
}

/**
 * A line of a task's text. How a running task's share of a GPU is held is a word of its own
 * after its devices ("GPU 0 (0.5) [mps]"), with what it means as its tooltip.
 */
export function TaskText(props: { parts: ReadonlyArray<ITextPart> }): JSX.Element {
  return (
    <>
      {props.parts.map((part, i) =>
        part.enforced ? (
          <span
            key={i}
            className="jp-sched-enforced"
            data-enforced={part.enforced.word}
            title={part.enforced.title}
          >
            {part.text}
          </span>
        ) : (
          <React.Fragment key={i}>{part.text}</React.Fragment>
        )
      )}
    </>
  );
}

/** How long a task has run, waited or been stopping, if known; it follows the state's badge. */
export function Elapsed(props: { task: ITaskRow }): JSX.Element | null {
  const { task } = props;
  return task.elapsedText ? (
    <span className="jp-sched-elapsed" title={task.elapsedTitle}>
      {task.elapsedText}
    </span>
  ) : null;
}

interface ISteering {
  /** The button's text. */
  text: string;
  /** Its accessible name, for task `label`: "Run task t7 train next". */
  name: (label: string) => string;
  /** What it does, in words, for its tooltip. */
  title: (label: string) => string;
}

const STEERING: { [command in SteerCommand]: ISteering } = {
  top: {
    text: 'Run next',
    name: label => `Run task ${label} next`,
    title: label => `Run task ${label} next: first in its queue`
  },
  hold: {
    text: 'Hold',
    name: label => `Hold task ${label}`,
    title: label => `Hold task ${label}: it waits and is not started until released`
  },
  release: {
    text: 'Release',
    name: label => `Release task ${label}`,
    title: label => `Release task ${label}: it waits in its queue again`
  }
};

/** How long after a click a steering button takes back the focus its row's redraw lost. */
const REFOCUS_MS = 5000;

/**
 * A waiting task's Run next and Hold (or Release) buttons. Hold and Release are one button,
 * so the focus stays on it when the task's state changes; if the next snapshot moves the row
 * and the focus is lost (to the page's body), the button last pressed takes it back.
 */
function SteerButtons(props: {
  task: ITaskRow;
  onSteer: (command: SteerCommand, task: string) => void;
}): JSX.Element | null {
  const { task, onSteer } = props;
  const buttons = React.useRef<(HTMLButtonElement | null)[]>([]);
  // the button last pressed, the task as it was then, and until when it may take the focus
  const pressed = React.useRef<{ slot: number; was: string; until: number } | null>(null);
  const now = `${task.state} ${task.position}`;
  React.useLayoutEffect(() => {
    const last = pressed.current;
    const button = last ? buttons.current[last.slot] : null;
    if (!last || !button || Date.now() > last.until) {
      pressed.current = null;
      return;
    }
    const active = button.ownerDocument.activeElement;
    if (active === button && now === last.was) {
      return; // a redraw before the snapshot that changes the task
    }
    if (active === null || active === button.ownerDocument.body) {
      button.focus();
    }
    pressed.current = null; // given back once, or the user has moved on
  });
  if (!task.steer.length) {
    return null;
  }
  return (
    <>
      {task.steer.map((command, slot) => (
        <button
          // the slot, not the command: Hold becomes Release in the same element
          key={slot}
          ref={element => {
            buttons.current[slot] = element;
          }}
          type="button"
          className={`jp-sched-steer jp-sched-${command} jp-mod-styled`}
          data-command={command}
          aria-label={STEERING[command].name(task.label)}
          title={STEERING[command].title(task.label)}
          onClick={() => {
            pressed.current = { slot, was: now, until: Date.now() + REFOCUS_MS };
            onSteer(command, task.id);
          }}
        >
          {STEERING[command].text}
        </button>
      ))}
    </>
  );
}

/**
 * One task in a list. Cancel is offered only to a task a cancel can still reach: not to one
 * that ended, nor to one already stopping (it holds its devices until its executor confirms).
 * A queued or held task may also be run next, held or released (`onSteer`).
 */
export function TaskItem(props: {
  task: ITaskRow;
  onCancel?: (task: string) => void;
  onSteer?: (command: SteerCommand, task: string) => void;
}): JSX.Element {
  const { task, onCancel, onSteer } = props;
  const needs = task.needs !== '-' ? `needs ${task.needs}` : '';
  return (
    <div
      className="jp-sched-task"
      data-task-id={task.id}
      data-state={task.state}
      data-position={task.position ?? undefined}
    >
      <div className="jp-sched-task-line">
        <span className="jp-sched-task-label" title={task.label}>
          {task.label}
        </span>
        {onCancel && task.cancellable ? (
          <button
            type="button"
            className="jp-sched-cancel jp-mod-styled"
            aria-label={`Cancel task ${task.label}`}
            title={`Cancel task ${task.label}`}
            onClick={() => onCancel(task.id)}
          >
            Cancel
          </button>
        ) : null}
      </div>
      <div className="jp-sched-task-meta">
        <StateBadge state={task.state} />
        {task.position !== null ? (
          <span className="jp-sched-position">#{task.position}</span>
        ) : null}
        <Elapsed task={task} />
        {needs ? (
          <span className="jp-sched-task-needs" title={needs}>
            {needs}
          </span>
        ) : null}
      </div>
      {onSteer && task.steer.length ? (
        <div className="jp-sched-task-foot">
          <span className="jp-sched-task-detail" title={task.stateTitle}>
            <TaskText parts={task.detailParts} />
          </span>
          <SteerButtons task={task} onSteer={onSteer} />
        </div>
      ) : task.detailText ? (
        <div className="jp-sched-task-detail" title={task.stateTitle}>
          <TaskText parts={task.detailParts} />
        </div>
      ) : null}
    </div>
  );
}

export interface ITaskListProps {
  tasks: ReadonlyArray<ITaskRow>;
  /** Rows the kernel counted beyond those listed. */
  more: number;
  label: string;
  empty: string;
  maxHeight?: number;
  onCancel?: (task: string) => void;
  onSteer?: (command: SteerCommand, task: string) => void;
}

export function TaskList(props: ITaskListProps): JSX.Element {
  if (!props.tasks.length && !props.more) {
    return <div className="jp-sched-empty">{props.empty}</div>;
  }
  return (
    <div className="jp-sched-tasks">
      <VirtualList
        items={props.tasks}
        rowHeight={ROW_HEIGHT}
        maxHeight={props.maxHeight ?? 360}
        label={props.label}
        itemKey={task => task.id}
        renderItem={task => (
          <TaskItem task={task} onCancel={props.onCancel} onSteer={props.onSteer} />
        )}
      />
      {props.more > 0 ? <div className="jp-sched-more">and {props.more} more</div> : null}
    </div>
  );
}

// -- queues -------------------------------------------------------------------------------------

const QUEUE_STATES = ['open', 'closed', 'draining'] as const;

export interface IQueueActions {
  onQueueState?: (queue: string, state: (typeof QUEUE_STATES)[number]) => void;
}

export function QueueTable(props: { queues: IQueueRow[] } & IQueueActions): JSX.Element {
  const { queues, onQueueState } = props;
  if (!queues.length) {
    return <div className="jp-sched-empty">No queues.</div>;
  }
  return (
    <div className="jp-sched-queues-wrap">
      <table className="jp-sched-queues">
        <thead>
          <tr>
            <th scope="col">queue</th>
            <th scope="col">state</th>
            <th scope="col">weight</th>
            <th scope="col">capability</th>
            <th scope="col">use</th>
            <th scope="col">running</th>
            <th scope="col">waiting</th>
          </tr>
        </thead>
        <tbody>
          {queues.map(q => (
            <tr key={q.name} className="jp-sched-queue" data-queue={q.name} data-state={q.state}>
              <td
                className="jp-sched-queue-name"
                title={q.parent !== 'root' && q.parent ? `${q.name} in ${q.parent}` : q.name}
              >
                {q.name}
              </td>
              <td className="jp-sched-queue-state-cell" data-label="state">
                {onQueueState ? (
                  <select
                    className="jp-sched-queue-state"
                    aria-label={`State of queue ${q.name}`}
                    value={q.state}
                    onChange={e =>
                      onQueueState(q.name, e.currentTarget.value as (typeof QUEUE_STATES)[number])
                    }
                  >
                    {QUEUE_STATES.map(s => (
                      <option key={s} value={s}>
                        {s}
                      </option>
                    ))}
                  </select>
                ) : (
                  q.state
                )}
              </td>
              <td data-label="weight">{q.weight}</td>
              <td data-label="capability" title={q.capabilityText}>
                {q.capabilityText}
              </td>
              <td data-label="use" title={`deserved: ${q.deservedText}`}>
                {q.allocatedText}
                {q.gpuUse !== null ? (
                  <span
                    className="jp-sched-queue-use"
                    data-use={q.gpuUse}
                    role="meter"
                    aria-label={`GPU use of queue ${q.name}`}
                    aria-valuemin={0}
                    aria-valuemax={1}
                    aria-valuenow={q.gpuUse}
                  >
                    <span
                      className="jp-sched-gpu-fill"
                      style={{ width: `${Math.round(q.gpuUse * 100)}%` }}
                    />
                  </span>
                ) : null}
              </td>
              <td
                className="jp-sched-queue-running"
                data-label="running"
                data-max-running={q.maxRunning ?? undefined}
                title={q.runningTitle}
              >
                {q.runningText}
              </td>
              <td data-label="waiting">{q.waiting}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
