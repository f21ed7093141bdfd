import { NOT_LOADED_AFTER_MS, RETRY_SPACING_MS, SchedConnection } from '../src/comm';
import { COMM_TARGET } from '../src/schema';
import { FakeComm, FakeContext, FakeKernel, snapshotMessage } from './fakes';

function connect(kernel = new FakeKernel()) {
  const connection = new SchedConnection({ interval: 0.5, window: 300 });
  const context = new FakeContext(kernel);
  connection.follow(context as any);
  return { connection, kernel, context };
}

beforeEach(() => {
  jest.useFakeTimers();
});

afterEach(() => {
  jest.useRealTimers();
});

describe('SchedConnection', () => {
  it('opens a comm with a subscribe command and goes live on the first snapshot', () => {
    const { connection, kernel } = connect();
    expect(kernel.targets.has(COMM_TARGET)).toBe(true);
    expect(kernel.comms).toHaveLength(1);
    const [open] = kernel.last.opened;
    expect(open).toEqual({
      v: 1,
      kind: 'command',
      id: open.id,
      command: 'subscribe',
      interval: 0.5,
      window: 300
    });
    expect(kernel.last.targetName).toBe('jupyter_sched');
    expect(connection.state).toBe('connecting');
    kernel.last.receive({
      v: 1,
      kind: 'reply',
      id: open.id,
      ok: true,
      error: null,
      result: { interval: 0.5, window: 300 }
    });
    kernel.last.receive(snapshotMessage(1));
    expect(connection.state).toBe('live');
    expect(connection.snapshot?.counts.running).toBe(6);
  });

  it('ignores snapshots older than the last one and envelopes it does not know', () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(2, 20));
    kernel.last.receive(snapshotMessage(1, 10));
    kernel.last.receive({ v: 2, kind: 'snapshot', seq: 9, data: {} });
    kernel.last.receive({ v: 1, kind: 'weather' });
    expect(connection.snapshot?.time).toBe(20);
  });

  it('is not-loaded at once when the kernel closes the comm (no such target)', () => {
    const { connection, kernel } = connect();
    kernel.last.onClose({});
    expect(connection.state).toBe('not-loaded');
  });

  it('is not-loaded when the kernel finished the comm_open without answering', () => {
    const { connection, kernel } = connect();
    kernel.idleAfter({ msg_id: kernel.last.openMsgId, msg_type: 'comm_open' });
    expect(connection.state).toBe('not-loaded');
    expect(kernel.last.isDisposed).toBe(true);
  });

  it('is not-loaded after a few seconds of silence from an idle kernel, busy from a busy one', () => {
    const idle = connect();
    jest.advanceTimersByTime(NOT_LOADED_AFTER_MS + 1);
    expect(idle.connection.state).toBe('not-loaded');
    const busy = new FakeKernel();
    busy.status = 'busy';
    const { connection } = connect(busy);
    jest.advanceTimersByTime(NOT_LOADED_AFTER_MS + 1);
    expect(connection.state).toBe('busy');
    busy.last.receive(snapshotMessage(1));
    expect(connection.state).toBe('live');
  });

  it('tries again after a cell ran, and not after its own tries (no loop)', () => {
    const { connection, kernel } = connect();
    kernel.last.onClose({});
    expect(kernel.comms).toHaveLength(1);
    // the idle that ends the failed comm_open brings no new try
    kernel.idleAfter({ msg_id: kernel.last.openMsgId, msg_type: 'comm_open' });
    expect(kernel.comms).toHaveLength(1);
    // a cell ran too soon after the last try: still none
    kernel.idleAfter({ msg_id: 'x1', msg_type: 'execute_request' });
    expect(kernel.comms).toHaveLength(1);
    jest.advanceTimersByTime(RETRY_SPACING_MS);
    kernel.idleAfter({ msg_id: 'x2', msg_type: 'execute_request' }); // maybe %load_ext
    expect(kernel.comms).toHaveLength(2);
    kernel.last.receive(snapshotMessage(1));
    expect(connection.state).toBe('live');
  });

  it('tries again at once after code that names the extension ran, however soon', () => {
    const { connection, kernel } = connect();
    kernel.last.onClose({});
    kernel.idleAfter({ msg_id: kernel.last.openMsgId, msg_type: 'comm_open' });
    expect(connection.state).toBe('not-loaded');
    // within the spacing, a cell of other code brings no try; one that loads it does
    kernel.executeInput('x1', 'print(1)');
    kernel.idleAfter({ msg_id: 'x1', msg_type: 'execute_request' });
    expect(kernel.comms).toHaveLength(1);
    kernel.executeInput('x2', '%load_ext jupyter_sched');
    expect(kernel.comms).toHaveLength(1); // (not while it runs: after)
    kernel.idleAfter({ msg_id: 'x2', msg_type: 'execute_request' });
    expect(kernel.comms).toHaveLength(2);
    kernel.last.receive(snapshotMessage(1));
    expect(connection.state).toBe('live');
  });

  it('opens its own comm when an older kernel announces itself, and closes that one', () => {
    const { connection, kernel } = connect();
    kernel.last.onClose({});
    expect(connection.state).toBe('not-loaded');
    const announcement = new FakeComm(COMM_TARGET);
    const target = kernel.targets.get(COMM_TARGET) as (comm: any, msg: any) => void;
    target(announcement, { content: { data: snapshotMessage(0) } });
    expect(connection.state).toBe('live');
    expect(announcement.isDisposed).toBe(true);
    expect(kernel.comms).toHaveLength(2);
    expect(kernel.last.opened[0].command).toBe('subscribe');
  });

  it('starts again after a restart, once the kernel is idle', () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(1));
    kernel.setStatus('restarting');
    expect(connection.state).toBe('restarting');
    expect(connection.snapshot).toBeNull();
    kernel.setStatus('starting');
    expect(kernel.comms).toHaveLength(1);
    kernel.setStatus('idle');
    expect(kernel.comms).toHaveLength(2);
    expect(connection.state).toBe('connecting');
  });

  it('follows a new kernel, leaving the old one', () => {
    const { connection, kernel, context } = connect();
    const other = new FakeKernel();
    context.changeKernel(other);
    expect(kernel.targets.has(COMM_TARGET)).toBe(false);
    expect(kernel.comms[0].isDisposed).toBe(true);
    expect(other.comms).toHaveLength(1);
    connection.follow(null);
    expect(connection.state).toBe('none');
    expect(other.last.isDisposed).toBe(true);
  });

  it("drops the last kernel's snapshot when it follows another session, and says so", () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(1));
    expect(connection.state).toBe('live');
    const states: string[] = [];
    connection.changed.connect(() => states.push(connection.state));
    const other = new FakeKernel();
    connection.follow(new FakeContext(other) as any);
    // never live without a snapshot: the status bar would show an empty item
    expect(connection.snapshot).toBeNull();
    expect(connection.state).toBe('connecting');
    expect(states).toEqual(['connecting']);
    expect(kernel.last.isDisposed).toBe(true);
    other.last.receive(snapshotMessage(1, 5));
    expect(connection.state).toBe('live');
    expect(connection.snapshot?.time).toBe(5);
  });

  it("gives the renderer the followed kernel's snapshot, and no other kernel's", () => {
    const { connection, kernel } = connect();
    expect(connection.snapshotOf(kernel.id)).toBeNull(); // no snapshot yet
    kernel.last.receive(snapshotMessage(1, 7));
    expect(connection.snapshotOf(kernel.id)?.time).toBe(7);
    expect(connection.snapshotOf('another-kernel')).toBeNull();
    kernel.setStatus('restarting');
    expect(connection.snapshotOf(kernel.id)).toBeNull();
    const other = new FakeKernel();
    connection.follow(new FakeContext(other) as any);
    other.last.receive(snapshotMessage(1, 3));
    expect(connection.snapshotOf(kernel.id)).toBeNull();
    expect(connection.snapshotOf(other.id)?.time).toBe(3);
  });

  it('sends commands with ids and resolves them with the reply', async () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(1));
    const pending = connection.send({ command: 'cancel', task: 't7' });
    const sent = kernel.last.sent[0];
    expect(sent).toEqual({ v: 1, kind: 'command', id: sent.id, command: 'cancel', task: 't7' });
    kernel.last.receive({
      v: 1,
      kind: 'reply',
      id: sent.id,
      ok: false,
      error: "no task 't7'",
      result: null
    });
    const reply = await pending;
    expect(reply.ok).toBe(false);
    expect(connection.lastError).toBe("no task 't7'");
  });

  it('passes a new refresh rate to the kernel', () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(1));
    connection.subscribe({ interval: 2, window: 60 });
    expect(kernel.last.sent[0]).toMatchObject({ command: 'subscribe', interval: 2, window: 60 });
  });

  it('rejects a command that gets no reply', async () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(1));
    const pending = connection.send({ command: 'snapshot' });
    jest.advanceTimersByTime(10001);
    await expect(pending).rejects.toThrow('no reply');
  });
});
