import neostandard from 'neostandard'

export default [
  ...neostandard({ ts: true, ignores: ['dist/**', 'node_modules/**', 'coverage/**'] }),
  {
    rules: {
      // `void promise` marks a deliberate fire-and-forget (sweepers, background reconnects).
      'no-void': ['error', { allowAsStatement: true }],
    },
  },
]
