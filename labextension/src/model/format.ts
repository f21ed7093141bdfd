/**
 * Numbers, sizes, durations, times of day, amounts and devices as text, as the kernel writes
 * them in its own text (`1.5`, `16 GiB`, `1 min 15 s`, `GPU 0 (0.5)`), and a line of text from
 * the kernel folded onto one line.
 */

import { Amounts, ITaskView } from '../schema';

/** `text` on one line: runs of white space (newlines too) become one space. */
export function oneLine(text: string | null | undefined): string {
  return (text ?? '').split(/\s+/).filter(Boolean).join(' ');
}

/**
 * An amount as the kernel writes one (Python's `{:g}`): `0.125` → "0.125", `2` → "2",
 * `1 / 3` → "0.333333": six significant digits, no trailing zeros.
 */
export function formatAmount(value: number): string {
  return Number.isFinite(value) ? String(Number(value.toPrecision(6))) : String(value);
}

/** `1.5` → "1.5", `2` → "2", `0.3333` → "0.33": at most two decimals, no trailing zeros. */
export function formatNumber(value: number): string {
  if (!Number.isFinite(value)) {
    return String(value);
  }
  return String(Math.round(value * 100) / 100);
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** `17179869184` → "16 GiB", `1536` → "1.5 KiB", `25276502016` → "23.5 GiB" (as the kernel). */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) {
    return '-';
  }
  let value = Math.max(0, bytes);
  let unit = 0;
  // 1023.6 GiB rounds to 1024: that is 1 TiB
  while (Math.round(value) >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const text = unit === 0 ? value.toFixed(0) : value.toFixed(1);
  return `${text.replace(/\.0$/, '')} ${UNITS[unit]}`;
}

/** `0.04` → "0.04 s", `75` → "1 min 15 s", `7300` → "2 h 1 min" (as the kernel's text does). */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) {
    return '-';
  }
  const s = Math.max(0, seconds);
  if (s < 1) {
    return `${s.toFixed(2)} s`;
  }
  if (s < 10) {
    return `${s.toFixed(1)} s`;
  }
  if (s < 60) {
    return `${Math.round(s)} s`;
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return `${minutes} min ${Math.floor(s) % 60} s`;
  }
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/**
 * An epoch time (seconds, wall clock) as a time of day on this computer's clock: "12:03:04";
 * "" when unknown.
 */
export function formatClock(epoch: number | null | undefined): string {
  if (epoch === null || epoch === undefined || !Number.isFinite(epoch) || epoch <= 0) {
    return '';
  }
  const date = new Date(epoch * 1000);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(date.getHours())}:${two(date.getMinutes())}:${two(date.getSeconds())}`;
}

/**
 * An amount of a resource with its unit where it has one: `memory` 8589934592 → "8 GiB",
 * `CPU` 2 → "2". The unit is part of the number's text; callers add none of their own.
 */
export function amountText(name: string, value: number): string {
  return name === 'memory' || name === 'gpu_memory' ? formatBytes(value) : formatAmount(value);
}

function resourceRank(name: string): number {
  const order = ['GPU', 'CPU', 'memory'];
  const i = order.indexOf(name);
  return i < 0 ? order.length : i;
}

/** `{"GPU": 0.5, "CPU": 2}` → "GPU 0.5, CPU 2" (GPU, CPU, memory first, then by name). */
export function formatAmounts(amounts: Amounts | null | undefined): string {
  const names = Object.keys(amounts ?? {}).sort(
    (a, b) => resourceRank(a) - resourceRank(b) || a.localeCompare(b)
  );
  const parts = names.map(name => {
    const label = name === 'gpu_memory' ? 'GPU memory' : name;
    return `${label} ${amountText(name, (amounts as Amounts)[name])}`;
  });
  return parts.join(', ') || '-';
}

/** `{"GPU": {"0": 0.5, "1": 1}}` → "GPU 0 (0.5), GPU 1". */
export function formatDevices(devices: ITaskView['devices'] | null | undefined): string {
  const parts: string[] = [];
  for (const [name, shares] of Object.entries(devices ?? {})) {
    const indices = Object.keys(shares).sort((a, b) => Number(a) - Number(b));
    for (const index of indices) {
      const share = shares[index];
      parts.push(share >= 1 ? `${name} ${index}` : `${name} ${index} (${formatAmount(share)})`);
    }
  }
  return parts.join(', ');
}

/** `t10` sorts after `t9`. */
export function compareIds(a: string, b: string): number {
  return a.localeCompare(b, 'en', { numeric: true });
}
