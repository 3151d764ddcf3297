#!/usr/bin/python3
"""The layers of fs/ call one way (docs/architecture.md "Source layout"): given the layers' static
libraries from the lowest (core) to the highest (fuse), no library may use a symbol that a higher
one defines, and only the highest may use libfuse. Reads the symbol tables with nm(1).

Run: check_layers.py libckcore.a libckpolicy.a libckwrite.a libcksteps.a libcknode.a libckfuse.a
Exit 0 when the layering holds; 1 with every upward call listed otherwise.
"""

import subprocess
import sys


def symbols(lib):
    out = subprocess.run(['nm', '--defined-only', '-g', lib], check=True, text=True,
                         stdout=subprocess.PIPE).stdout
    defined = {ln.split()[-1] for ln in out.splitlines() if len(ln.split()) == 3}
    out = subprocess.run(['nm', '--undefined-only', '-g', lib], check=True, text=True,
                         stdout=subprocess.PIPE).stdout
    used = {ln.split()[-1] for ln in out.splitlines() if ln.strip() and not ln.endswith(':')}
    return defined, used


def main(libs):
    tables = [symbols(lib) for lib in libs]
    bad = []
    for i, (_, used) in enumerate(tables):
        for j in range(i + 1, len(tables)):
            for s in sorted(used & tables[j][0]):
                bad.append('%s uses %s from the higher layer %s' % (libs[i], s, libs[j]))
        if i < len(tables) - 1:
            for s in sorted(u for u in used if u.startswith('fuse_')):
                bad.append('%s uses libfuse (%s): only the FUSE layer may' % (libs[i], s))
    if not tables[-1][1] & {s for s in tables[-1][1] if s.startswith('fuse_')}:
        bad.append('%s uses no libfuse symbol: is it the FUSE layer?' % libs[-1])
    for b in bad:
        print(b)
    print('%d layers, %d upward calls' % (len(libs), len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
