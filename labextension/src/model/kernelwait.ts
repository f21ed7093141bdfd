/**
 * What a notebook shows while its kernel waits for its GPU: a provisioned kernel (the
 * kernelspec names jupyter-sched's kernel provisioner) waits for its lease before its process
 * exists, and the page, whose request to start it answers only once it runs, does not know
 * the kernel's id yet. The host view (`api/sched/host`) names each wait's kernel and notebook
 * (`notebook NAME`, from the session's name): the wait of a kernel of this server labelled
 * with the notebook's name is the notebook's. Pure: no fetching, no DOM; the words are text.
 */

import { IHostData, IHostWait, share } from './host';

/** What the notebook shows of its kernel's wait. */
export interface IKernelWaitNotice {
  /** The waiting kernel's id (shutting it down ends the wait). */
  kernel: string;
  /** `waiting for a GPU: 2nd on this host, held by ana (0.5), bob (1)`. */
  text: string;
}

/** `1st`, `2nd`, `3rd`, `11th`, `22nd`. */
export function ordinal(n: number): string {
  const teen = n % 100 >= 11 && n % 100 <= 13;
  const suffix = teen ? 'th' : (['th', 'st', 'nd', 'rd'][n % 10] ?? 'th');
  return `${n}${suffix}`;
}

/** The label a provisioned kernel's lease and wait give the notebook at `path`. */
export function notebookLabel(path: string): string {
  return `notebook ${path.slice(path.lastIndexOf('/') + 1)}`;
}

/** The words of one wait. */
export function waitText(wait: IHostWait): string {
  const held = wait.held_by.map(h => `${h.user} (${share(h.share)})`).join(', ');
  return (
    `waiting for a GPU: ${ordinal(wait.position)} on this host` + (held ? `, held by ${held}` : '')
  );
}

/**
 * The wait of the kernel starting for the notebook at `path`, if the host view shows one (the
 * first in the host's order where two notebooks of one name wait), else null.
 */
export function kernelWait(data: IHostData | null, path: string): IKernelWaitNotice | null {
  const label = notebookLabel(path);
  const wait = (data?.waits ?? []).find(w => w.this_server && w.kernel && w.label === label);
  return wait ? { kernel: wait.kernel as string, text: waitText(wait) } : null;
}
