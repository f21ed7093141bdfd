import { sortRunning, sortWaiting, taskRow, taskStateText } from '../../src/model/tasks';
import { task } from '../helpers';

describe('sorting', () => {
  it("puts queued before infeasible and keeps the kernel's queue order", () => {
    const tasks = [
      task('t9', { state: 'infeasible', reason: 'GPU: needs 4' }),
      task('t3', { state: 'queued', position: 2 }),
      task('t2', { state: 'queued', position: 1, queue: 'other' }),
      task('t4', { state: 'pending' })
    ];
    expect(sortWaiting(tasks).map(t => t.id)).toEqual(['t3', 't2', 't4', 't9']);
  });

  it('orders running tasks by node, then by start, then by id', () => {
    const tasks = [
      task('t10', { state: 'running', node: 'b', started: 1 }),
      task('t9', { state: 'running', node: 'a', started: 5 }),
      task('t2', { state: 'running', node: 'a', started: 2 }),
      task('t1', { state: 'running', node: 'a', started: 2 })
    ];
    expect(sortRunning(tasks, ['a', 'b']).map(t => t.id)).toEqual(['t1', 't2', 't9', 't10']);
  });
});

describe('rows', () => {
  it('says where a task waits, why it cannot run, and for how long', () => {
    const queued = taskRow(task('t5', { position: 2, submitted: 10 }), 25);
    expect(queued.stateText).toBe('queued, position 2 in default');
    expect(queued.elapsed).toBe(15);
    const infeasible = taskRow(
      task('t6', { state: 'infeasible', reason: 'GPU: needs 4 whole,\nhas 2' })
    );
    expect(infeasible.stateText).toBe('infeasible: GPU: needs 4 whole, has 2');
    const running = taskRow(
      task('t7', { state: 'running', node: 'local', devices: { GPU: { '0': 0.5 } }, started: 3 }),
      8
    );
    expect(running.stateText).toBe('running on local, GPU 0 (0.5)');
    expect(running.elapsed).toBe(5);
    expect(taskRow(task('t8', { name: 't8' })).label).toBe('t8');
  });

  it('says where or why without the state, which the row shows beside it', () => {
    expect(taskRow(task('t5', { position: 2 })).detailText).toBe('position 2 in default');
    const infeasible = task('t6', { state: 'infeasible', reason: 'GPU: needs 4 whole, has 2' });
    expect(taskRow(infeasible).detailText).toBe('GPU: needs 4 whole, has 2');
    const running = task('t7', { state: 'running', node: 'local', devices: { GPU: { '0': 1 } } });
    expect(taskRow(running).detailText).toBe('on local, GPU 0');
    expect(taskRow(task('t8', { state: 'running' })).detailText).toBe('');
  });

  it('counts elapsed times up to the clock it is given', () => {
    const running = task('t7', { state: 'running', node: 'local', started: 3 });
    expect(taskRow(running, 8).elapsedText).toBe('5.0 s');
    expect(taskRow(running, 78).elapsedText).toBe('1 min 15 s');
    expect(taskRow(running, 8).elapsedTitle).toBe('running for 5.0 s');
    const queued = task('t5', { submitted: 10 });
    expect(taskRow(queued, 12).elapsedText).toBe('2.0 s');
    expect(taskRow(queued, 40).elapsedText).toBe('30 s');
    expect(taskRow(queued, 40).elapsedTitle).toBe('waiting for 30 s');
    // ended: what it took, whatever the clock says
    const done = task('t2', { state: 'done', started: 2, ended: 9.5 });
    expect(taskRow(done, 1000).elapsedText).toBe('7.5 s');
    // no clock (a payload without a time): no running time at all
    expect(taskRow(running, null).elapsedText).toBe('');
  });

  it('shows a stopping task the time since its stop, not its run time, and no cancel', () => {
    const stopping = task('t3', {
      state: 'stopping',
      node: 'local',
      started: 10,
      stopping_since: 100,
      reason: 'cancelled from the Scheduler sidebar'
    });
    const row = taskRow(stopping, 103);
    expect(row.elapsed).toBe(3);
    expect(row.elapsedText).toBe('3.0 s');
    expect(row.elapsedTitle).toBe(
      'stopping: stop asked 3.0 s ago; the task holds its devices until it has stopped'
    );
    expect(taskRow(stopping, 175).elapsedText).toBe('1 min 15 s');
    expect(row.cancellable).toBe(false);
    // where it still is, as the kernel says it: on its node, holding no device
    expect(row.detailText).toBe('on local: cancelled from the Scheduler sidebar');
    // a kernel that does not say since when: no time rather than the run time
    expect(taskRow({ ...stopping, stopping_since: undefined }, 103).elapsedText).toBe('');
  });

  it('offers cancel to tasks a cancel can still reach', () => {
    const cancellable = (state: string) => taskRow(task('t1', { state })).cancellable;
    expect(['pending', 'queued', 'infeasible', 'running'].map(cancellable)).toEqual([
      true,
      true,
      true,
      true
    ]);
    expect(['stopping', 'done', 'failed', 'cancelled'].map(cancellable)).toEqual([
      false,
      false,
      false,
      false
    ]);
  });
});

describe('a task waiting for what other kernels hold', () => {
  const REASON =
    '1 of GPU 1 is held by another kernel (pid 4242, user bob, notebook train.ipynb, task t3, ' +
    'since 12:03:04); GPU 0 reserved for waits ahead on this host: a task waiting for 2 whole ' +
    'GPUs (pid 4343, user carol); this kernel is 2nd on this host for GPU 0';

  it('says why on its line, and where it stands in its queue in its title', () => {
    const row = taskRow(task('t9', { position: 1, reason: REASON, demand: { GPU: 2 } }));
    expect(row.stateText).toBe(`queued, position 1 in default: ${REASON}`);
    expect(row.detailText).toBe(REASON);
    expect(row.reason).toBe(REASON);
    // without a reason, as before
    expect(taskRow(task('t9', { position: 1 })).detailText).toBe('position 1 in default');
  });
});

describe('a held task', () => {
  const held = task('t5', { state: 'held', submitted: 10 });

  it('says it is held and waits to be released, with no position, as the kernel says it', () => {
    const row = taskRow({ ...held, position: 3 }, 40);
    expect(row.state).toBe('held');
    expect(row.position).toBeNull();
    expect(row.stateText).toBe('held: never started until released');
    expect(row.detailText).toBe('never started until released');
    expect(row.elapsedTitle).toBe('waiting for 30 s');
    // the kernel's words, when it sends them, are the row's line
    const why = taskRow({ ...held, text: 'held: by alice until Monday' });
    expect(why.stateText).toBe('held: by alice until Monday');
    expect(why.detailText).toBe('by alice until Monday');
  });

  it("keeps its place in the kernel's order, before infeasible tasks", () => {
    const tasks = [
      task('t9', { state: 'infeasible' }),
      task('t3', { position: 1 }),
      task('t5', { state: 'held' }),
      task('t4', { position: 2 })
    ];
    expect(sortWaiting(tasks).map(t => t.id)).toEqual(['t3', 't5', 't4', 't9']);
  });
});

describe('steering', () => {
  it('offers Run next and Hold to a queued task, Run next and Release to a held one', () => {
    const steer = (state: string) => taskRow(task('t1', { state, position: 2 })).steer;
    expect(steer('queued')).toEqual(['top', 'hold']);
    expect(steer('held')).toEqual(['top', 'release']);
    for (const state of ['pending', 'infeasible', 'running', 'stopping', 'done', 'failed']) {
      expect([state, steer(state)]).toEqual([state, []]);
    }
    expect([taskRow(task('t1', { state: 'cancelled' })).steer]).toEqual([[]]);
    // the task that is next already may be run next: the button stays where it was pressed
    expect(taskRow(task('t1', { position: 1 })).steer).toEqual(['top', 'hold']);
  });
});

describe('how a running share of a GPU is held', () => {
  const quarter = { node: 'local', devices: { GPU: { '0': 0.25 } }, started: 3 };

  it('follows the devices of a running task, as the kernel writes it', () => {
    const row = taskRow(task('t1', { state: 'running', ...quarter, enforced: 'logical' }));
    expect(row.stateText).toBe('running on local, GPU 0 (0.25) [logical]');
    expect(row.detailText).toBe('on local, GPU 0 (0.25) [logical]');
    expect(row.where).toBe('local, GPU 0 (0.25) [logical]');
    expect(row.enforced).toEqual({
      word: 'logical',
      text: '[logical]',
      title: 'nothing caps this share: a promise between schedulers'
    });
    // the word is a part of its own, so a view can give it its tooltip
    expect(row.detailParts).toEqual([
      { text: 'on local, GPU 0 (0.25) ' },
      { text: '[logical]', enforced: row.enforced }
    ]);
    expect(row.stateTitle).toBe(
      'running on local, GPU 0 (0.25) [logical]\n[logical]: nothing caps this share: a promise between schedulers'
    );
  });

  it('says what each word means', () => {
    const title = (enforced: string) =>
      taskRow(task('t1', { state: 'running', ...quarter, enforced })).enforced?.title;
    expect(title('mps')).toBe("NVIDIA MPS caps this task's process to its share");
    expect(title('torch')).toBe('a torch memory cap holds this task to its share of the memory');
    expect(title('later')).toBe("how this task's share of the GPU is held: later");
    const half = task('t2', { state: 'running', node: 'local', devices: { GPU: { '0': 0.5 } } });
    expect(taskStateText({ ...half, enforced: 'mps' })).toBe('running on local, GPU 0 (0.5) [mps]');
  });

  it('is not said where the kernel does not say it', () => {
    const row = taskRow(task('t1', { state: 'running', ...quarter }));
    expect(row.stateText).toBe('running on local, GPU 0 (0.25)');
    expect(row.enforced).toBeNull();
    expect(row.detailParts).toEqual([{ text: 'on local, GPU 0 (0.25)' }]);
    expect(row.stateTitle).toBe(row.stateText);
  });

  it('is not said of a task that ended, nor of one that holds no devices', () => {
    for (const state of ['done', 'failed', 'cancelled', 'queued']) {
      const row = taskRow(task('t1', { state, ...quarter, enforced: 'mps', ended: 9 }));
      expect(row.enforced).toBeNull();
      expect(row.stateText).not.toContain('[mps]');
    }
    const done = taskRow(task('t1', { state: 'done', ...quarter, enforced: 'mps', ended: 9 }));
    expect(done.stateText).toBe('done on local, GPU 0 (0.25)');
    const nowhere = taskRow(task('t1', { state: 'running', node: 'local', enforced: 'mps' }));
    expect(nowhere.stateText).toBe('running on local');
    expect(nowhere.enforced).toBeNull();
  });

  it("follows a stopping task's devices, which it holds until it has stopped", () => {
    const stopping = task('t1', {
      state: 'stopping',
      ...quarter,
      enforced: 'torch',
      stopping_since: 5,
      reason: 'cancelled from the Scheduler sidebar'
    });
    const row = taskRow(stopping);
    expect(row.stateText).toBe(
      'stopping on local, GPU 0 (0.25) [torch]: cancelled from the Scheduler sidebar'
    );
    expect(row.detailText).toBe(
      'on local, GPU 0 (0.25) [torch]: cancelled from the Scheduler sidebar'
    );
    expect(row.enforced?.word).toBe('torch');
    // one that holds no devices says where it stops and why
    const bare = { ...stopping, devices: {}, enforced: undefined };
    expect(taskRow(bare).stateText).toBe('stopping on local: cancelled from the Scheduler sidebar');
  });
});

describe("the kernel's words for a task's state", () => {
  const running = task('t1', {
    state: 'running',
    node: 'local',
    devices: { GPU: { '0': 0.25 } },
    enforced: 'mps'
  });

  it('are shown as the kernel wrote them, the enforcement word a part of its own', () => {
    // a later kernel may say more than this frontend would write: its words are shown
    const row = taskRow({ ...running, text: 'running on local, GPU 0 (0.25) [mps], warming up' });
    expect(row.stateText).toBe('running on local, GPU 0 (0.25) [mps], warming up');
    expect(row.detailParts).toEqual([
      { text: 'on local, GPU 0 (0.25) ' },
      { text: '[mps]', enforced: row.enforced },
      { text: ', warming up' }
    ]);
    // a word the text does not carry is not made up
    expect(taskRow({ ...running, text: 'running on local' }).detailParts).toEqual([
      { text: 'on local' }
    ]);
  });

  it('are written here as the kernel writes them when it sent none', () => {
    expect(taskRow(running).stateText).toBe('running on local, GPU 0 (0.25) [mps]');
    const engine = task('t2', { state: 'running', node: 'gpu1', slot: 'e3', enforced: 'mps' });
    expect(taskRow(engine).stateText).toBe('running on gpu1 (engine e3)');
    const eighth = { ...engine, devices: { GPU: { '1': 0.125 } } };
    expect(taskRow(eighth).stateText).toBe('running on gpu1 (engine e3), GPU 1 (0.125) [mps]');
    expect(taskRow(task('t3', { state: 'failed', reason: 'x' }), null, 'E: y').stateText).toBe(
      'failed: E: y'
    );
    expect(taskRow(task('t4', { state: 'pending' })).stateText).toBe('pending');
  });
});

describe('expected starts and cells', () => {
  it("count a queued task's expected start down from the payload's time", () => {
    const queued = task('t5', { position: 1, expected_start: 200 });
    expect(taskRow(queued, 100, null, 100).startText).toBe('starts in ~3 min');
    expect(taskRow(queued, 250, null, 100).startText).toBe('starts in ~50 s');
    expect(taskRow(queued, 400, null, 100).startText).toBe('expected to start now');
    // no clock: as the kernel said it
    expect(taskRow(queued).startText).toBe('starts in ~3 min');
    const unknown = task('t6', {
      expected_start: null,
      start_unknown: 'no run of `train` seen yet'
    });
    expect(taskRow(unknown, 100, null, 100).startText).toBe(
      'start unknown: no run of `train` seen yet'
    );
    // only a queued task says when it starts; an old kernel says nothing of it
    const held = task('t7', { state: 'held', expected_start: 5 });
    expect(taskRow(held, 100, null, 100).startText).toBe('');
    expect(taskRow(task('t8'), 100, null, 100).startText).toBe('');
  });

  it('have a cell to jump to only when the kernel said which', () => {
    expect(taskRow(task('t1', { cell: 'f00d-1' })).cell).toBe('f00d-1');
    expect(taskRow(task('t2')).cell).toBeNull();
    expect(taskRow(task('t3', { cell: '' })).cell).toBeNull();
    expect(taskRow(task('t4', { cell: 7 as unknown as string })).cell).toBeNull();
    expect(taskRow(task('t5', { cell: 'a b' })).cell).toBeNull();
  });
});
