import {
  amountText,
  formatAmount,
  formatAmounts,
  formatBytes,
  formatClock,
  formatDevices,
  formatDuration,
  formatNumber
} from '../../src/model/format';
import { SINCE } from '../helpers';

describe('text', () => {
  it('formats numbers, bytes and durations', () => {
    expect(formatNumber(1.5)).toBe('1.5');
    expect(formatNumber(2)).toBe('2');
    expect(formatNumber(1 / 3)).toBe('0.33');
    expect(formatBytes(17179869184)).toBe('16 GiB');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(null)).toBe('-');
    expect(formatDuration(0.04)).toBe('0.04 s');
    expect(formatDuration(75)).toBe('1 min 15 s');
    expect(formatDuration(7300)).toBe('2 h 1 min');
  });

  it('writes a unit once, and the next unit up when rounding reaches it', () => {
    expect(formatBytes(8 * 2 ** 30)).toBe('8 GiB');
    expect(formatBytes(2 ** 40 - 2 ** 20)).toBe('1 TiB');
    expect(formatBytes(1023)).toBe('1023 B');
    expect(amountText('memory', 8 * 2 ** 30)).toBe('8 GiB');
    expect(amountText('gpu_memory', 1.5 * 2 ** 30)).toBe('1.5 GiB');
    expect(amountText('CPU', 2)).toBe('2');
  });

  it('writes amounts and shares as the kernel does, to six digits', () => {
    expect(formatAmount(0.125)).toBe('0.125');
    expect(formatAmount(2)).toBe('2');
    expect(formatAmount(1 / 3)).toBe('0.333333');
    expect(formatAmounts({ GPU: 0.125, CPU: 0.5 })).toBe('GPU 0.125, CPU 0.5');
    expect(formatDevices({ GPU: { '0': 0.125 } })).toBe('GPU 0 (0.125)');
    // a GPU bar's share stays short: two decimals
    expect(formatNumber(0.125)).toBe('0.13');
  });

  it('formats demands and devices like the kernel', () => {
    expect(formatAmounts({ CPU: 2, GPU: 0.5, memory: 2 ** 30 })).toBe(
      'GPU 0.5, CPU 2, memory 1 GiB'
    );
    expect(formatAmounts({})).toBe('-');
    expect(formatDevices({ GPU: { '1': 1, '0': 0.5 } })).toBe('GPU 0 (0.5), GPU 1');
  });
});

describe('times of day', () => {
  it("writes the time of day of an epoch time on this computer's clock", () => {
    expect(formatClock(SINCE)).toBe('12:03:04');
    expect(formatClock(new Date(2026, 0, 2, 7, 8, 9).getTime() / 1000)).toBe('07:08:09');
    expect(formatClock(0)).toBe('');
    expect(formatClock(null)).toBe('');
  });
});
