import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    testTimeout: 20_000,
    hookTimeout: 30_000,
    // Two cores: two test files at a time keeps process-heavy tests from starving each other.
    maxWorkers: 2,
    reporters: ['default'],
  },
})
