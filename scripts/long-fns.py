#!/usr/bin/env python3
"""Lists functions longer than a limit (default 70 lines) and files longer
than 600 lines in the workspace's Rust sources (tests excluded unless
--tests): a style check from ../shared/STYLE.md, run by hand."""
import re, sys, pathlib

limit = 70
include_tests = '--tests' in sys.argv
fn_re = re.compile(r'^(\s*)(pub(\([a-z]+\))? )?(const )?(unsafe )?(extern "C" )?fn (\w+)')
for path in sorted(pathlib.Path('.').glob('crates/**/*.rs')):
    if not include_tests and ('/tests/' in str(path) or '/examples/' in str(path)):
        continue
    lines = path.read_text().splitlines()
    if len(lines) > 600:
        print(f'{path}: {len(lines)} lines (file)')
    for i, line in enumerate(lines):
        m = fn_re.match(line)
        if not m or line.rstrip().endswith(';'):
            continue
        indent = m.group(1)
        for j in range(i + 1, len(lines)):
            if lines[j] == indent + '}':
                if j - i + 1 > limit:
                    print(f'{path}:{i + 1}: fn {m.group(7)} {j - i + 1} lines')
                break
