/** A clock the doubles and the code under test share, so a test can let time pass (max_age, expiry). */
export class TestClock {
  private offsetMs = 0;
  now = (): number => Date.now() + this.offsetMs;
  advance(seconds: number): void {
    this.offsetMs += seconds * 1000;
  }
  iso(offsetSeconds = 0): string {
    return new Date(this.now() + offsetSeconds * 1000).toISOString();
  }
}
