import { taskRow } from '../../src/model/tasks';
import { payloadNow, taskNow } from '../../src/model/live';
import { IGangPayload, IStatusPayload, ITaskPayload, ITaskView } from '../../src/schema';
import { kernelSnapshot, payload, runningTask, snapshotOf, statusOf, taskRun } from '../helpers';

describe('a task shown in an output, as it is now', () => {
  // t3 was submitted at 10 and started at 12 on GPU 0; the output says so at 20
  const running = runningTask();
  const output: ITaskPayload = { version: 1, kind: 'task', time: 20, task: running, error: null };
  const run = taskRun;
  const snapshot = (time: number, fields: Partial<IStatusPayload> = {}, timeline = [run()]) =>
    snapshotOf(statusOf({ time, ...fields }), { timeline });

  it('is the listed task of the same submission, running or waiting', () => {
    const stopping = { ...running, state: 'stopping', stopping_since: 30 };
    expect(taskNow(snapshot(31, { running: [stopping] }, []), running)).toEqual(stopping);
    const queued = { ...running, state: 'queued', started: null, position: 2 };
    expect(taskNow(snapshot(31, { waiting: [queued] }, []), running)).toEqual(queued);
  });

  it('is not another task of the same id: a kernel restarted counts from t1 again', () => {
    const other = { ...running, submitted: 3, started: 4 };
    expect(taskNow(snapshot(50, { running: [other] }, []), running)).toBeNull();
    expect(taskNow(snapshot(50, {}, [run({ start: 4 })]), running)).toBeNull();
    expect(taskNow(snapshot(50, {}, [run()]), { ...running, started: null })).toBeNull();
  });

  it('has ended when its GPU holdings say so: the state and the end, the rest as it was', () => {
    const done = taskNow(snapshot(41), running);
    expect(done).toEqual({ ...running, state: 'done', ended: 40, stopping_since: null });
    expect(taskRow(done!).stateText).toBe('done on local, GPU 0 (0.5)');
    // the kernel's words said it was running: they are not kept for a task that ended
    const said = { ...running, text: 'running on local, GPU 0 (0.5)' };
    expect(taskNow(snapshot(41), said)).toEqual(done);
    expect(taskRow(done!).elapsedText).toBe('28 s');
    // preempted and started again: every run carries the state now, the last one its end
    const runs = [run({ start: 12, end: 15, state: 'failed' }), run({ start: 18, end: 44 })];
    expect(taskNow(snapshot(45, {}, runs), { ...running, started: 18 })?.state).toBe('done');
    expect(taskNow(snapshot(45, {}, runs), { ...running, started: 18 })?.ended).toBe(44);
  });

  it('has ended, as the history of tasks that ended lately says, GPU or none', () => {
    const cpu = { ...running, devices: {}, started: 12 };
    const ended = { ...cpu, state: 'done', ended: 33 };
    const later = snapshotOf(statusOf({ time: 40 }), { timeline: [], history: [ended] });
    expect(taskNow(later, cpu)).toEqual(ended);
    // one that held a GPU: the devices it ran on stay, though the history lists none
    const gpu = snapshotOf(statusOf({ time: 40 }), {
      timeline: [],
      history: [{ ...running, state: 'done', ended: 33, devices: {} }]
    });
    expect(taskNow(gpu, running)?.devices).toEqual({ GPU: { '0': 0.5 } });
    expect(taskRow(taskNow(gpu, running)!).stateText).toBe('done on local, GPU 0 (0.5)');
    // the kernel's words for it say no devices: the words are written again with them
    const said = snapshotOf(statusOf({ time: 40 }), {
      timeline: [],
      history: [{ ...running, state: 'done', ended: 33, devices: {}, text: 'done on local' }]
    });
    expect(taskRow(taskNow(said, running)!).stateText).toBe('done on local, GPU 0 (0.5)');
    // one that lists its devices keeps the kernel's words
    const kept = snapshotOf(statusOf({ time: 40 }), {
      timeline: [],
      history: [{ ...ended, text: 'done on local: as said' }]
    });
    expect(taskRow(taskNow(kept, cpu)!).stateText).toBe('done on local: as said');
    // another task of that id (a kernel restarted) is not it
    const other = snapshotOf(statusOf({ time: 40 }), {
      timeline: [],
      history: [{ ...ended, submitted: 3 }]
    });
    expect(taskNow(other, cpu)).toBeNull();
  });

  it('is unknown when the snapshot does not list it', () => {
    expect(taskNow(snapshot(50, {}, []), running)).toBeNull();
    expect(taskNow(snapshot(50, {}, [run({ task: 't4' })]), running)).toBeNull();
    expect(payloadNow(output, snapshot(50, {}, []))).toBeNull();
  });

  it('comes from a snapshot newer than the output, with its time', () => {
    expect(payloadNow(output, snapshot(19))).toBeNull();
    const now = payloadNow(output, snapshot(41)) as ITaskPayload;
    expect(now.time).toBe(41);
    expect(now.task.state).toBe('done');
    expect(now.error).toBeNull();
    // an old kernel's payload has no time: any snapshot may say more
    const { time: _, ...timeless } = output;
    expect((payloadNow(timeless, snapshot(41)) as ITaskPayload).task.state).toBe('done');
  });

  it('leaves outputs of tasks that ended, and the other kinds, as they are', () => {
    const failed = { ...running, state: 'failed', ended: 13 };
    expect(payloadNow({ ...output, task: failed }, snapshot(41))).toBeNull();
    const queue = { ...payload('queue'), time: 1 };
    expect(payloadNow(queue, snapshot(41, { running: queue.running }))).toBeNull();
  });

  it('updates the members of a gang it knows, and keeps the others', () => {
    const member = (id: string, rank: number) => ({ ...running, id, gang: 'ring', rank });
    const gang: IGangPayload = {
      version: 1,
      kind: 'gang',
      name: 'ring',
      time: 20,
      error: null,
      tasks: [member('t3', 0), member('t4', 1), { ...member('t5', 2), state: 'done', ended: 15 }]
    };
    const now = payloadNow(gang, snapshot(41)) as IGangPayload;
    expect(now.tasks.map(t => t.state)).toEqual(['done', 'running', 'done']);
    expect(now.tasks[2]).toBe(gang.tasks[2]);
    expect(now.name).toBe('ring');
  });
});

describe("a task of the kernel's output, as the kernel's own snapshot says it is now", () => {
  it('is the listed task, in its words', () => {
    const snapshot = kernelSnapshot();
    const line = payload('line') as ITaskPayload;
    const now = payloadNow({ ...line, time: 1 }, snapshot) as ITaskPayload;
    expect(now.time).toBe(snapshot.time);
    expect(now.task).toEqual(snapshot.running.find(t => t.id === line.task.id));
    expect(taskRow(now.task).stateText).toBe('running on local, GPU 0 (0.5) [logical]');
  });

  it('has ended on the GPU its timeline says, no longer in the words it had running', () => {
    const snapshot = kernelSnapshot();
    const ended = snapshot.history!.find(t => t.name === 'warmup')!;
    // its status line as the kernel drew it while it ran
    const running: ITaskView = {
      ...ended,
      state: 'running',
      ended: null,
      devices: { GPU: { '0': 0.5 } },
      enforced: 'logical',
      text: 'running on local, GPU 0 (0.5) [logical]'
    };
    const line: ITaskPayload = { version: 1, kind: 'task', time: 4, task: running, error: null };
    const now = payloadNow(line, snapshot) as ITaskPayload;
    const run = snapshot.timeline.find(r => r.task === ended.id)!;
    expect([now.task.state, now.task.ended, now.task.text]).toEqual(['done', run.end, undefined]);
    expect(taskRow(now.task).stateText).toBe('done on local, GPU 0 (0.5)');
  });

  it('has failed, as the history says in its words, when it held no GPU', () => {
    const snapshot = kernelSnapshot();
    const failed = snapshot.history!.find(t => t.state === 'failed')!;
    const running: ITaskView = { ...failed, state: 'running', ended: null, reason: '' };
    delete running.text;
    const line: ITaskPayload = { version: 1, kind: 'task', time: 4, task: running, error: null };
    const now = payloadNow(line, snapshot) as ITaskPayload;
    expect(now.task).toEqual(failed);
    expect(taskRow(now.task).stateText).toBe('failed: ZeroDivisionError: division by zero');
  });
});
