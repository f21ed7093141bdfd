/**
 * A node's card: whether it takes work, what is free of each resource, its labels, and a bar
 * per GPU (./gpus). Pure: node view (and this kernel's running tasks) → row.
 */

import { INodeView, ITaskView } from '../schema';
import { amountText } from './format';
import { gpuBar, IGpuBar, tasksOn } from './gpus';

export interface INodeRow {
  name: string;
  kind: string;
  drained: boolean;
  /** "ready" or "drained". */
  stateText: string;
  /** "CPU 2/4 free · memory 12 GiB/16 GiB free · slots 3/4 free". */
  freeText: string;
  /** The same in parts ("CPU 2/4 free", …), each of which a view keeps on one line. */
  freeParts: string[];
  /** Its labels in words: `GPU NVIDIA A100, 80GiB · team=vision`: the GPUs' model and (the
   * smallest) memory from `gpu.*`, a declared node's "declared GPUs", others as `key=value`. */
  labelsText: string;
  /** The labels as `--on` selects nodes by them (`--on gpu.model=NVIDIA A100`), for a tooltip. */
  labelsTitle: string;
  running: number;
  gpus: IGpuBar[];
}

/** `memory` → "memory 12 GiB/16 GiB free": the unit comes with each amount, once. */
function freeOf(node: INodeView, name: string): string | null {
  const total = node.total?.[name];
  if (!total) {
    return null;
  }
  const free = node.available?.[name] ?? 0;
  return `${name} ${amountText(name, free)}/${amountText(name, total)} free`;
}

/** Labels every node has, said elsewhere on its card (its kind) or not at all (its host). */
const UNSAID = new Set(['kind', 'host']);

/** A node's labels in words (see `INodeRow.labelsText`), in the order of the payload. */
export function labelWords(labels: { [key: string]: string }): string[] {
  const words: string[] = [];
  const declared = labels['gpu.declared'] === 'true';
  const model = labels['gpu.model'] ?? '';
  const memory = labels['gpu.memory'] ?? '';
  if (declared) {
    words.push(memory ? `declared GPUs, ${memory}` : 'declared GPUs');
  } else if (model || memory) {
    words.push(`GPU ${[model, memory].filter(Boolean).join(', ')}`);
  }
  for (const [key, value] of Object.entries(labels)) {
    if (!UNSAID.has(key) && !key.startsWith('gpu.')) {
      words.push(`${key}=${value}`);
    }
  }
  return words;
}

/** The labels as `--on KEY=VALUE` selects by them (every one, the host's too). */
function labelsTitle(labels: { [key: string]: string }): string {
  const pairs = Object.entries(labels).map(([key, value]) => `${key}=${value}`);
  return pairs.length
    ? `Labels (%%sched --on KEY=VALUE runs on nodes that have one): ${pairs.join(', ')}`
    : '';
}

/**
 * A node's card. `running`: this kernel's running tasks, when the list is all of them, so
 * each GPU's line can say which of them hold it; otherwise (a `nodes` payload, a bounded
 * list) what other kernels do not hold counts as this kernel's.
 */
export function nodeRow(node: INodeView, running?: ReadonlyArray<ITaskView> | null): INodeRow {
  const free = [freeOf(node, 'CPU'), freeOf(node, 'memory')].filter(Boolean) as string[];
  if (node.slots) {
    free.push(`slots ${node.free_slots}/${node.slots} free`);
  }
  const labels = labelWords(node.labels ?? {});
  const tasks = running ? tasksOn(node.name, running) : null;
  return {
    name: node.name,
    kind: node.kind,
    drained: !!node.drained,
    stateText: node.drained ? 'drained' : 'ready',
    freeText: free.join(' · '),
    freeParts: free,
    labelsText: labels.join(' · '),
    labelsTitle: labelsTitle(node.labels ?? {}),
    running: node.running ?? 0,
    gpus: (node.devices ?? []).map(d => gpuBar(node.name, d, tasks))
  };
}
