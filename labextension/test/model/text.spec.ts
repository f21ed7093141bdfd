import { taskLabel, taskStateText } from '../../src/model/tasks';
import { runningWords, stateWords } from '../../src/model/text';
import { IQueueView, ITaskView } from '../../src/schema';
import { bundle, kernelSnapshot, payload } from '../helpers';

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
});
