// Lint for the whole tree: typescript-eslint's strict type-checked rules, plus the two checks
// that matter most for money code (docs/decisions.md, "Lint and format"):
// - no-floating-promises: a payment step whose promise is dropped can fail unseen;
// - switch-exhaustiveness-check: a new state or outcome must be handled everywhere it is switched on.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules/**',
      'codegen/**',
      'openapi/dist/**',
      '.data/**',
      '.tmp/**',
      // Generated: the stdio MCP server's bundle (bin/payment-router-mcp.mjs) and hardhat's downloads.
      '.cache/**',
      'artifacts/**',
      'cache/**',
      'dist/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
      globals: { ...globals.node },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': [
        'error',
        { considerDefaultExhaustiveForUnions: true, requireDefaultForNonUnion: false },
      ],
      // Numbers and bigints (atomic amounts) print exactly in a template; objects and nullish
      // values do not, and stay refused.
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true, allowBoolean: true }],
      '@typescript-eslint/no-confusing-void-expression': ['error', { ignoreArrowShorthand: true }],
    },
  },
  {
    // Tests read JSON answers whose shape the OpenAPI validation has already checked, and index
    // into arrays they just asserted the length of; the money code keeps these rules.
    files: ['test/**'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    ...tseslint.configs.disableTypeChecked,
  },
  {
    // The console's script runs in the browser (server/consolePage.ts inlines it).
    files: ['server/console/**/*.js'],
    languageOptions: { globals: { ...globals.browser } },
  },
  {
    // k6 scripts run inside k6, not Node.
    files: ['load/*.js', 'load/lib/**/*.js'],
    languageOptions: { globals: { __ENV: 'readonly', __VU: 'readonly', __ITER: 'readonly', open: 'readonly' } },
  },
);
