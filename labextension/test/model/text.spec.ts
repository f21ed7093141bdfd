import { taskLabel, taskStateText } from '../../src/model/tasks';
import { runningWords, startWords, stateWords } from '../../src/model/text';
import { IQueueView, ITaskView } from '../../src/schema';
import { bundle, kernelSnapshot, payload, task as taskOf } from '../helpers';

/** Every task the kernel's output shows, with the error its payload gives it. */
function kernelTasks(): { task: ITaskView; error: string | null; where: string }[] {
  const status = payload('status');
  const listed = [...status.running, ...status.waiting, ...payload('history').history];
  const alone = ['task', 'infeasible', 'failed'].map(name => ({
    task: payload(name).task,
    error: payload(name).error,
    where: name
  }));
  const members = payload('gang').tasks.map((task: ITaskView) => ({ task, error: null }));
  return [
    ...listed.map((task: ITaskView) => ({ task, error: null, where: 'status' })),
    ...kernelSnapshot().history!.map(task => ({ task, error: null, where: 'snapshot' })),
    ...alone,
    ...members.map((m: { task: ITaskView; error: null }) => ({ ...m, where: 'gang' }))
  ];
}

describe("the frontend's words for a task's state", () => {
  it("are the kernel's, word for word, for every task of the kernel's output", () => {
    const tasks = kernelTasks();
    const states = new Set(tasks.map(t => t.task.state));
    expect([...states].sort()).toEqual(
      ['cancelled', 'done', 'failed', 'held', 'infeasible', 'queued', 'running', 'stopping'].sort()
    );
    for (const { task, error, where } of tasks) {
      const { text, ...fields } = task;
      expect([where, task.id, stateWords(fields, error)]).toEqual([where, task.id, text]);
      // and the row shows the kernel's words, whether it sent them or not
      expect(taskStateText(task, error)).toBe(text);
      expect(taskStateText(fields, error)).toBe(text);
    }
  });

  it("make a task's line of the kernel's text/plain after its label", () => {
    for (const name of ['task', 'infeasible', 'failed']) {
      const { task, error } = payload(name);
      const { text: _, ...fields } = task;
      expect(`${taskLabel(task)}: ${stateWords(fields, error)}`).toBe(bundle(name)['text/plain']);
    }
  });

  it("say how many of a queue's tasks run as the kernel's queue table does", () => {
    const lines: string[] = bundle('queues')['text/plain'].split('\n');
    for (const queue of payload('queues').queues as IQueueView[]) {
      const line = lines.find(l => l.startsWith(`${queue.name} `)) as string;
      const words = runningWords(queue.running, queue.max_running ?? null);
      expect(line.split(/\s{2,}/)).toContain(words);
    }
  });

  it('say how many attempts a task took, as the kernel does, when more than one', () => {
    // as jupyter_sched/views/format.py's task_state_text writes them
    const failed = taskOf('t1', { state: 'failed', reason: 'ValueError: bad <b>7</b>' });
    expect(stateWords({ ...failed, attempts: 3 })).toBe(
      'failed after 3 attempts: ValueError: bad <b>7</b>'
    );
    expect(stateWords({ ...failed, attempts: 1 })).toBe('failed: ValueError: bad <b>7</b>');
    expect(stateWords(failed)).toBe('failed: ValueError: bad <b>7</b>');
    expect(stateWords({ ...failed, attempts: 2 }, 'KeyError: x')).toBe(
      'failed after 2 attempts: KeyError: x'
    );
    const cancelled = taskOf('t2', { state: 'cancelled', reason: 'time limit', attempts: 2 });
    expect(stateWords(cancelled)).toBe('cancelled after 2 attempts: time limit');
    const done = taskOf('t3', { state: 'done', node: 'local', attempts: 2 });
    expect(stateWords(done)).toBe('done after 2 attempts on local');
    const running = taskOf('t4', { state: 'running', node: 'local', attempts: 4 });
    expect(stateWords({ ...running, devices: { GPU: { '0': 1 } } })).toBe(
      'running on local, GPU 0, attempt 4'
    );
    // what is no count of attempts says none
    expect(stateWords({ ...failed, attempts: 'many' as unknown as number })).toBe(
      'failed: ValueError: bad <b>7</b>'
    );
  });

  it("say a queued task's expected start as the kernel does", () => {
    // each pair as jupyter_sched/views/format.py's start_text writes it
    const said: [number, string][] = [
      [0.5, 'expected to start now'],
      [1, 'starts in ~1 s'],
      [30, 'starts in ~30 s'],
      [59.4, 'starts in ~59 s'],
      [90, 'starts in ~2 min'],
      [150, 'starts in ~2 min'],
      [180, 'starts in ~3 min'],
      [3599, 'starts in ~60 min'],
      [5400, 'starts in ~1.5 h'],
      [7380, 'starts in ~2.0 h']
    ];
    for (const [seconds, words] of said) {
      expect([seconds, startWords(seconds)]).toEqual([seconds, words]);
    }
    expect(startWords(null, 'no run of `train`\n seen yet')).toBe(
      'start unknown: no run of `train` seen yet'
    );
    expect(startWords(null, '')).toBe('');
    expect(startWords(undefined)).toBe('');
    expect(startWords(NaN, 'why')).toBe('start unknown: why');
  });
});
