/**
 * A queue's row: its state, weight, capability, what it holds and deserves, how many of its
 * tasks run (of how many may) and wait. Pure: queue view → row.
 */

import { IQueueView } from '../schema';
import { formatAmounts } from './format';
import { runningWords } from './text';
import { clampShare } from './values';

export interface IQueueRow {
  name: string;
  parent: string;
  state: string;
  weight: number;
  priority: number;
  capabilityText: string;
  allocatedText: string;
  deservedText: string;
  running: number;
  waiting: number;
  /** Tasks of the queue that may run at once, or null for no limit. */
  maxRunning: number | null;
  /** Its running tasks: "2", or "2 of max 3" under a limit. */
  runningText: string;
  /** The same in words, for a tooltip: "2 running, at most 3 at once". */
  runningTitle: string;
  /** GPU allocated over GPU capability (0 to 1), or null without a GPU capability. */
  gpuUse: number | null;
}

export function queueRow(queue: IQueueView): IQueueRow {
  const cap = queue.capability?.GPU;
  const running = queue.running ?? 0;
  const max = queue.max_running;
  const maxRunning = typeof max === 'number' && Number.isFinite(max) ? max : null;
  return {
    name: queue.name,
    parent: queue.parent,
    state: queue.state,
    weight: queue.weight,
    priority: queue.priority,
    capabilityText: Object.keys(queue.capability ?? {}).length
      ? formatAmounts(queue.capability)
      : 'unlimited',
    allocatedText: formatAmounts(queue.allocated),
    deservedText: formatAmounts(queue.deserved),
    running,
    waiting: queue.waiting ?? 0,
    maxRunning,
    runningText: runningWords(running, maxRunning),
    runningTitle:
      maxRunning === null
        ? `${running} running`
        : `${running} running, at most ${maxRunning} at once`,
    gpuUse: cap ? clampShare((queue.allocated?.GPU ?? 0) / cap) : null
  };
}
