/**
 * The tasks that ended lately, the latest first: each with its state's icon, its name (a
 * button that shows its cell when that is known), the time of day it ended, and how it ended
 * (a failed one marked as such). Draws `IEndedRow`s (../model/ended); every string from the
 * kernel is a React text node or an attribute value, never markup.
 */

import * as React from 'react';

import { IEndedRow } from '../model/ended';
import { stateIcon, TaskName } from './tasks';

export function EndedItem(props: { row: IEndedRow; onJump?: (cell: string) => void }): JSX.Element {
  const { row } = props;
  const className = row.failed ? 'jp-sched-ended jp-sched-ended-failed' : 'jp-sched-ended';
  return (
    <li className={className} data-task-id={row.id} data-state={row.state}>
      <div className="jp-sched-ended-line">
        <span className="jp-sched-state" data-state={row.state}>
          <span className="jp-sched-state-icon" aria-hidden="true">
            {stateIcon(row.state)}
          </span>
        </span>
        <TaskName
          label={row.label}
          cell={row.cell}
          className="jp-sched-ended-label"
          onJump={props.onJump}
        />
        {row.endedText ? (
          <span className="jp-sched-ended-at" title={`ended at ${row.endedText}`}>
            {row.endedText}
          </span>
        ) : null}
      </div>
      <div className="jp-sched-ended-outcome" title={row.title}>
        {row.outcome}
      </div>
    </li>
  );
}

export function EndedList(props: {
  rows: ReadonlyArray<IEndedRow>;
  /** Tasks that ended beyond those listed. */
  more: number;
  onJump?: (cell: string) => void;
}): JSX.Element {
  if (!props.rows.length && !props.more) {
    return <div className="jp-sched-empty">Nothing ended yet.</div>;
  }
  return (
    <div className="jp-sched-ended-list">
      <ul className="jp-sched-ended-rows" aria-label="Tasks that ended lately, the latest first">
        {props.rows.map(row => (
          <EndedItem key={row.id} row={row} onJump={props.onJump} />
        ))}
      </ul>
      {props.more > 0 ? <div className="jp-sched-more">and {props.more} more</div> : null}
    </div>
  );
}
