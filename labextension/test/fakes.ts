/**
 * A kernel, its comms and a session context, as `SchedConnection` uses them: the test plays
 * the kernel's side of docs/comm.md through these.
 */

import { Signal } from '@lumino/signaling';

import { kernelSnapshot } from './helpers';

let nextId = 0;

export class FakeComm {
  constructor(readonly targetName: string) {}
  commId = `comm-${++nextId}`;
  isDisposed = false;
  onMsg: (msg: any) => void = () => undefined;
  onClose: (msg: any) => void = () => undefined;
  opened: any[] = [];
  sent: any[] = [];
  openMsgId = `open-${nextId}`;
  open(data: any) {
    this.opened.push(data);
    return { msg: { header: { msg_id: this.openMsgId, msg_type: 'comm_open' } } };
  }
  send(data: any) {
    this.sent.push(data);
    return {};
  }
  close() {
    this.isDisposed = true;
    return {};
  }
  /** The kernel sends `data` on this comm. */
  receive(data: any) {
    this.onMsg({ content: { comm_id: this.commId, data } });
  }
}

export class FakeKernel {
  /** The server's id of the kernel: notices dismissed are remembered by it. */
  id = `kernel-${++nextId}`;
  status = 'idle';
  isDisposed = false;
  statusChanged = new Signal<FakeKernel, string>(this);
  iopubMessage = new Signal<FakeKernel, any>(this);
  connectionStatusChanged = new Signal<FakeKernel, string>(this);
  targets = new Map<string, (comm: any, msg: any) => void>();
  comms: FakeComm[] = [];
  registerCommTarget(name: string, cb: (comm: any, msg: any) => void) {
    this.targets.set(name, cb);
  }
  removeCommTarget(name: string, cb: any) {
    if (this.targets.get(name) === cb) {
      this.targets.delete(name);
    }
  }
  createComm(target: string) {
    const comm = new FakeComm(target);
    this.comms.push(comm);
    return comm;
  }
  get last(): FakeComm {
    return this.comms[this.comms.length - 1];
  }
  setStatus(status: string) {
    this.status = status;
    this.statusChanged.emit(status);
  }
  /** The code of request `msgId`, as the kernel echoes it before running it. */
  executeInput(msgId: string, code: string) {
    this.iopubMessage.emit({
      header: { msg_type: 'execute_input' },
      parent_header: { msg_id: msgId, msg_type: 'execute_request' },
      content: { code, execution_count: 1 }
    });
  }
  /** An idle status whose parent is `parent` (what the kernel says after each request). */
  idleAfter(parent: { msg_id: string; msg_type: string }) {
    this.iopubMessage.emit({
      header: { msg_type: 'status' },
      parent_header: parent,
      content: { execution_state: 'idle' }
    });
  }
}

export class FakeContext {
  kernelChanged = new Signal<FakeContext, any>(this);
  session: { kernel: FakeKernel | null };
  name = 'train.ipynb';
  kernelDisplayName = 'Python 3';
  constructor(kernel: FakeKernel | null) {
    this.session = { kernel };
  }
  changeKernel(kernel: FakeKernel | null) {
    const old = this.session.kernel;
    this.session = { kernel };
    this.kernelChanged.emit({ name: 'kernel', oldValue: old, newValue: kernel });
  }
}

/** A `snapshot` envelope of the kernel's own, with `data` put over it. */
export function snapshotMessage(seq: number, time = 1, data: { [key: string]: unknown } = {}) {
  return { v: 1, kind: 'snapshot', seq, data: { ...kernelSnapshot(), time, ...data } };
}
