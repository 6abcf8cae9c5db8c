// The client's event listeners (`on`, `off`) and their calls.

/** A set of listeners for each event of `E` (an event name → the type of its value). */
export type Listeners<E> = { [K in keyof E]: Set<(v: E[K]) => void> };

export class Emitter<E> {
  /** `listeners` names every event, each with an empty set: listening to another throws. */
  constructor(private readonly listeners: Listeners<E>) {}

  on<K extends keyof E>(event: K, fn: (v: E[K]) => void): void {
    this.listeners[event].add(fn);
  }

  off<K extends keyof E>(event: K, fn: (v: E[K]) => void): void {
    this.listeners[event].delete(fn);
  }

  /** How many listen to `event`. */
  count(event: keyof E): number {
    return this.listeners[event].size;
  }

  /** Calls every listener of `event` (those listening when it starts), each in turn: one
   *  that throws does not stop the others, nor the caller. */
  emit<K extends keyof E>(event: K, value: E[K]): void {
    for (const fn of [...this.listeners[event]]) {
      try {
        fn(value);
      } catch {
        /* a listener's failure is its own */
      }
    }
  }
}
