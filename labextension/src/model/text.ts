/**
 * Words the frontend shares with the kernel, in one place.
 *
 * The kernel writes each task's state in words (a task's `text`, docs/schema.md) and the
 * views show that: `queued, position 2 in default: …`, `running on local, GPU 0 (0.5)
 * [logical]`. `stateWords` writes the same sentence from a task's fields for the tasks the
 * kernel wrote none for: those of kernels before `text`, and a task this frontend brings up to
 * date from a later snapshot (./live). It follows `task_state_text` and `where_text` of
 * jupyter_sched/views/format.py word for word, and test/model/text.spec.ts holds it to the
 * kernel's own words for every task of test/fixtures/bundles.json (which the kernel writes,
 * tests/lab_fixtures.py), so the two cannot drift apart.
 *
 * Also here: which tasks say how their share of a GPU is held, what each of those words means
 * (the kernel sends the word only), and a queue's running tasks under a limit, as
 * `%sched queues` writes them.
 */

import { ITaskView } from '../schema';
import { formatDevices, oneLine } from './format';

/** What each enforcement word means; a word not known here is shown with a plainer line. */
const ENFORCEMENT: { [word: string]: string } = {
  logical: 'nothing caps this share: a promise between schedulers',
  mps: "NVIDIA MPS caps this task's process to its share",
  torch: 'a torch memory cap holds this task to its share of the memory'
};

/** The states whose tasks hold devices now, so how their share is held is said. */
const HOLDING = new Set(['running', 'stopping']);

/**
 * How `task` holds its share of a GPU (`logical`, `mps`, `torch`, or a word of a later
 * kernel), when it is running or stopping on devices and the kernel says; "" otherwise (an
 * ended task holds nothing, whatever its row still says).
 */
export function enforcedWord(task: ITaskView): string {
  const word = typeof task.enforced === 'string' ? oneLine(task.enforced) : '';
  const holds = HOLDING.has(String(task.state)) && !!task.node && !!formatDevices(task.devices);
  return holds ? word : '';
}

/** What an enforcement word means, in one line. */
export function enforcementMeaning(word: string): string {
  return Object.prototype.hasOwnProperty.call(ENFORCEMENT, word)
    ? ENFORCEMENT[word]
    : `how this task's share of the GPU is held: ${word}`;
}

/**
 * Where a task runs or ran: "local, GPU 0 (0.5)", "local (engine e1)"; a running or stopping
 * task's share says how it is held after its devices: "local, GPU 0 (0.5) [mps]". "" when it
 * has no node.
 */
export function whereWords(task: ITaskView): string {
  if (!task.node) {
    return '';
  }
  let devices = formatDevices(task.devices);
  const word = enforcedWord(task);
  if (devices && word) {
    devices += ` [${word}]`;
  }
  const engine = task.slot ? ` (engine ${task.slot})` : '';
  return `${task.node}${engine}${devices ? `, ${devices}` : ''}`;
}

/** How many times a task started, when the kernel says (more than once); else 0. */
export function attemptsOf(task: ITaskView): number {
  const attempts = task.attempts;
  return typeof attempts === 'number' && Number.isInteger(attempts) ? attempts : 0;
}

/** A task's state in words, as the kernel writes it; `error`: a failed task's error line. */
export function stateWords(task: ITaskView, error?: string | null): string {
  const state = String(task.state);
  const reason = oneLine(task.reason);
  const where = whereWords(task);
  const on = where ? ` on ${where}` : '';
  // a task that started more than once (retried, preempted) says how many times
  const attempts = attemptsOf(task);
  const after = attempts > 1 ? ` after ${attempts} attempts` : '';
  switch (state) {
    case 'queued': {
      // the reason, when there is one, says what others on the host hold
      const queue = task.queue ? ` in ${task.queue}` : '';
      const text = task.position ? `queued, position ${task.position}${queue}` : `queued${queue}`;
      return reason ? `${text}: ${reason}` : text;
    }
    case 'infeasible':
      return reason ? `infeasible: ${reason}` : 'infeasible';
    case 'held':
      return 'held: never started until released';
    case 'running':
      return `running${on}${attempts > 1 ? `, attempt ${attempts}` : ''}`;
    case 'stopping':
      // it holds its devices until its executor confirms
      return `stopping${on}${reason ? `: ${reason}` : ''}`;
    case 'failed': {
      const why = error ? oneLine(error) : reason;
      return why ? `failed${after}: ${why}` : `failed${after}`;
    }
    case 'cancelled':
      return reason ? `cancelled${after}: ${reason}` : `cancelled${after}`;
    case 'done':
      return `done${after}${on}`;
    default:
      return state;
  }
}

/**
 * A queued task's expected start, as the kernel writes it (`start_text` of
 * jupyter_sched/views/format.py): "starts in ~3 min", "start unknown: no run of `train` seen
 * yet"; "" when there is no estimate. `seconds`: from now.
 */
export function startWords(seconds: number | null | undefined, unknown?: string | null): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) {
    const why = oneLine(typeof unknown === 'string' ? unknown : '');
    return why ? `start unknown: ${why}` : '';
  }
  if (seconds < 1) {
    return 'expected to start now';
  }
  if (seconds < 60) {
    return `starts in ~${pyRound(seconds)} s`;
  }
  if (seconds < 3600) {
    return `starts in ~${pyRound(seconds / 60)} min`;
  }
  return `starts in ~${(seconds / 3600).toFixed(1)} h`;
}

/** `x` rounded as Python's `{:.0f}` does: halves to even (2.5 → 2, 3.5 → 4). */
function pyRound(x: number): number {
  const floor = Math.floor(x);
  const rest = x - floor;
  if (rest !== 0.5) {
    return Math.round(x);
  }
  return floor % 2 === 0 ? floor : floor + 1;
}

/** A queue's running tasks: "2", or "2 of max 3" under a limit. */
export function runningWords(running: number, max: number | null): string {
  return max === null ? String(running) : `${running} of max ${max}`;
}
