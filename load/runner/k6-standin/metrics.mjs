import { record } from './state.mjs';

class Metric {
  constructor(name) {
    this.name = name;
  }

  add(value, tags) {
    record(this.name, Number(value), tags);
  }
}

export class Counter extends Metric {}
export class Trend extends Metric {}
export class Rate extends Metric {}
export class Gauge extends Metric {}
