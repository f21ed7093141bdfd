/**
 * Tasks: a state with its icon, a task's name (a button that shows its cell in the notebook
 * when that is known), a task's text (its enforcement word with its own tooltip), its elapsed
 * time, its row in a list with Cancel (and the steering buttons and expected start of a
 * waiting one), and a windowed list of rows. Draws `ITaskRow`s (../model/tasks).
 *
 * Every string from the kernel is a React text node or an attribute value, never markup.
 */

import * as React from 'react';

import { ITaskRow, ITextPart } from '../model/tasks';
import { SteerCommand } from '../schema';
import { VirtualList } from './list';
import { SteerButtons } from './steer';

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

/** A state's icon: ✓ done, ✗ failed, ▶ running, …; • for a state not known here. */
export function stateIcon(state: string): string {
  return Object.prototype.hasOwnProperty.call(STATE_ICONS, state) ? STATE_ICONS[state] : '•';
}

/** A state with its icon; the colour comes from `data-state` in the style sheet. */
export function StateBadge(props: { state: string }): JSX.Element {
  const icon = stateIcon(props.state);
  return (
    <span className="jp-sched-state" data-state={props.state}>
      <span className="jp-sched-state-icon" aria-hidden="true">
        {icon}
      </span>
      {props.state}
    </span>
  );
}

/**
 * Height of one task row in pixels: fixed, so the list can window its rows. A row has three
 * lines (name and Cancel; state, position, time and demand; where or why, and a waiting
 * task's Run next and Hold), each one line high whatever the width: long text ends in an
 * ellipsis and shows whole in its tooltip. The buttons that steer a task share the last line,
 * so that its name keeps the width of the first.
 */
export const ROW_HEIGHT = 66;

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

/**
 * A task's name (`label`, whole in its tooltip `className`'s element). With the id of the cell
 * that submitted it and `onJump`, the name is a button that shows that cell in its notebook
 * (selected, scrolled to); with either unknown, it is text.
 */
export function TaskName(props: {
  label: string;
  cell: string | null;
  className: string;
  onJump?: (cell: string) => void;
}): JSX.Element {
  const { label, cell, onJump } = props;
  return (
    <span className={props.className} title={label}>
      {cell !== null && onJump ? (
        <button
          type="button"
          className="jp-sched-jump"
          title={`Show the cell of task ${label} in its notebook`}
          data-cell={cell}
          onClick={() => onJump(cell)}
        >
          {label}
        </button>
      ) : (
        label
      )}
    </span>
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

/**
 * One task in a list. Cancel is offered only to a task a cancel can still reach: not to one
 * that ended, nor to one already stopping (it holds its devices until its executor confirms).
 * A queued or held task may also be run next, held or released (`onSteer`); a queued one
 * says when it is expected to start. Its name shows its cell (`onJump`), when known.
 */
export function TaskItem(props: {
  task: ITaskRow;
  onCancel?: (task: string) => void;
  onSteer?: (command: SteerCommand, task: string) => void;
  onJump?: (cell: string) => void;
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
        <TaskName
          label={task.label}
          cell={task.cell}
          className="jp-sched-task-label"
          onJump={props.onJump}
        />
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
        {task.startText ? (
          <span className="jp-sched-start" title={task.startText}>
            {task.startText}
          </span>
        ) : null}
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
  /** Every row drawn in the page's flow, each as tall as its text, which wraps (in a
   * notebook's output, a record: no scroll box inside the notebook's, no reason cut short);
   * otherwise a windowed list of `maxHeight` at most whose rows are one line each. */
  flow?: boolean;
  onCancel?: (task: string) => void;
  onSteer?: (command: SteerCommand, task: string) => void;
  /** Show the cell that submitted a task (its id). */
  onJump?: (cell: string) => void;
}

export function TaskList(props: ITaskListProps): JSX.Element {
  if (!props.tasks.length && !props.more) {
    return <div className="jp-sched-empty">{props.empty}</div>;
  }
  const more = props.more > 0 ? <div className="jp-sched-more">and {props.more} more</div> : null;
  if (props.flow) {
    return (
      <div className="jp-sched-tasks">
        <div
          className="jp-sched-list jp-mod-flow"
          role="list"
          aria-label={props.label}
          data-count={props.tasks.length}
        >
          {props.tasks.map(task => (
            <div key={task.id} role="listitem" className="jp-sched-list-item">
              <TaskItem
                task={task}
                onCancel={props.onCancel}
                onSteer={props.onSteer}
                onJump={props.onJump}
              />
            </div>
          ))}
        </div>
        {more}
      </div>
    );
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
          <TaskItem
            task={task}
            onCancel={props.onCancel}
            onSteer={props.onSteer}
            onJump={props.onJump}
          />
        )}
      />
      {more}
    </div>
  );
}
