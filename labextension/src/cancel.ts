/**
 * Cancel one task of one of this server's kernels from the Running panel's "GPU leases":
 * through the page's own connection to that kernel (a notebook's or a console's: only one
 * connection per kernel may handle comms, and a second would close the comms the kernel opens
 * meanwhile), a `jupyter_sched` comm that subscribes, the `cancel` command of docs/comm.md,
 * and the kernel's reply; then the comm is closed. The kernel runs nothing it receives: it
 * cancels the task by its id, as the sidebar's Cancel does.
 */

import { Kernel, KernelMessage as KM } from '@jupyterlab/services';

import { COMM_TARGET, COMM_VERSION, readEnvelope } from './schema';

/** How long the kernel has to answer (it answers at once unless a cell blocks it). */
export const CANCEL_TIMEOUT_MS = 10000;

export async function cancelTask(
  connections: Iterable<Kernel.IKernelConnection>,
  kernelId: string,
  task: string,
  timeout = CANCEL_TIMEOUT_MS
): Promise<void> {
  const kernel = Array.from(connections).find(k => k.id === kernelId && !k.isDisposed);
  if (!kernel) {
    throw new Error(
      `kernel ${kernelId} is not open in this page: open its notebook to cancel task ` +
        `${task}, or shut the kernel down`
    );
  }
  const comm = kernel.createComm(COMM_TARGET);
  const answer = new Promise<{ ok: boolean; error: string | null }>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`kernel ${kernelId} did not answer the cancel of ${task}`)),
      timeout
    );
    comm.onMsg = (msg: KM.ICommMsgMsg) => {
      const envelope = readEnvelope(msg.content.data);
      if (envelope?.kind === 'reply' && envelope.id === 'cancel') {
        clearTimeout(timer);
        resolve(envelope);
      }
    };
    comm.onClose = () => {
      clearTimeout(timer);
      reject(new Error(`jupyter_sched is not loaded in kernel ${kernelId}`));
    };
  });
  // (snapshots as rare as may be: this comm is closed at the reply)
  comm.open({
    v: COMM_VERSION,
    kind: 'command',
    id: 'open',
    command: 'subscribe',
    interval: 60,
    window: 60
  });
  comm.send({ v: COMM_VERSION, kind: 'command', id: 'cancel', command: 'cancel', task });
  let reply: { ok: boolean; error: string | null };
  try {
    reply = await answer;
  } finally {
    if (!comm.isDisposed) {
      comm.close();
    }
  }
  if (!reply.ok) {
    throw new Error(reply.error ?? `cancelling ${task} failed`);
  }
}
