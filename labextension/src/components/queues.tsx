/**
 * The queues as a table: state (a select, where a kernel can be told), weight, capability,
 * use with a GPU meter, running (of how many may) and waiting. Draws `IQueueRow`s
 * (../model/queues).
 *
 * Every string from the kernel is a React text node or an attribute value, never markup.
 */

import * as React from 'react';

import { IQueueRow } from '../model/queues';

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
