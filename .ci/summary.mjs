// Prints "N passed, N failed" over vitest JSON reports; a missing or unreadable report counts as a failure.
import { readFileSync } from 'node:fs';

let passed = 0;
let failed = Number(process.env.FAILED_CHECKS ?? 0);
for (const file of process.argv.slice(2)) {
  try {
    const report = JSON.parse(readFileSync(file, 'utf8'));
    passed += report.numPassedTests;
    failed += report.numFailedTests;
    // A file that failed outside its tests (an import or a beforeAll) fails no test: count it too.
    failed += (report.testResults ?? []).filter(
      (result) =>
        result.status === 'failed' && !result.assertionResults.some((assertion) => assertion.status === 'failed'),
    ).length;
  } catch {
    console.error(`no readable test report at ${file}`);
    failed += 1;
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
