#!/usr/bin/python3
"""The manual pages ckptfs(8) and ckptctl(8) against the binaries they document.

From the built binaries' own help:
  - every `-o NAME` and every `-x`/`--long` flag that `ckptfs --help` prints (ckptfs's options
    and the generic FUSE ones) must be in an entry heading of the OPTIONS section of ckptfs.8;
  - every command of `ckptctl --help` (and `ckptctl COMMAND --help`) must begin an entry
    heading of the COMMANDS section of ckptctl.8 (`remote [verify|gc]` as `remote`,
    `remote verify`, `remote gc`), and every flag they print be in an entry heading of its
    OPTIONS section.
An entry heading is the term of a term-and-indented-text entry (scdoc's `*term*` line followed
by a tab-indented paragraph; .TP in hand-written roff), not a mention in running text.
Each page must render with `man -l` (MANWIDTH=80) without groff warnings, to non-empty text
with NAME (naming the program), SYNOPSIS and OPTIONS sections. A failure names what is missing
and the .scd file to add it to.

Environment: CKPTFS_BIN, CKPTCTL_BIN (default build/fs/ckptfs, build/tools/ckptctl),
CKPTFS_MAN_DIR (the build directory's doc/, where the generated .8 files are; default: doc/
beside the fs/ directory holding CKPTFS_BIN).
Run: /usr/bin/python3 tests/install/test_manpages.py [-v]
"""

import sys

sys.dont_write_bytecode = True

import os  # noqa: E402
import re  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402

# A flag as a help text or a page shows it: -x or --long-name, not inside a word (multi-threaded)
FLAG = r'(?<![\w-])(--?[A-Za-z][\w-]*)'
# An option of -o as ckptfs --help shows it: "-o name=VALUE" or "-o name"
O_NAME = r'(?<![\w-])-o\s+([A-Za-z]\w*)'


def man_dir():
    d = os.environ.get('CKPTFS_MAN_DIR')
    if d:
        return os.path.abspath(d)
    return os.path.join(os.path.dirname(os.path.dirname(ckfs.ckptfs_bin())), 'doc')


def page_path(name):
    """The generated page name (ckptfs.8) in man_dir(); fails the test when it is missing."""
    p = os.path.join(man_dir(), name)
    if not os.path.isfile(p):
        raise AssertionError('%s not found: build the manual pages first (ninja -C BUILD '
                             'doc/%s; scdoc is Debian package scdoc), or set CKPTFS_MAN_DIR'
                             % (p, name))
    return p


def roff_text(path):
    """The roff source of a page as plain text: comments dropped, font changes and
    zero-width escapes removed, \\- and \\e as the characters they print."""
    with open(path, encoding='utf-8') as f:
        lines = [ln for ln in f.read().splitlines() if not ln.startswith('.\\"')]
    s = '\n'.join(lines)
    s = re.sub(r'\\f(\(..|\[[^\]]*\]|.)', '', s)
    s = s.replace('\\&', '').replace('\\-', '-').replace('\\e', '\\')
    s = s.replace('\\(aq', "'").replace('\\*(Aq', "'")
    return s


def entries(text, name):
    """The entry headings of section .SH NAME of a page's roff_text, up to the next .SH: the
    lines an indented paragraph follows (.RS, as scdoc writes a term and its text) or a .TP
    starts. One string, a heading per line; '' when the section is missing or has none."""
    m = re.search(r'^\.SH +"?%s"?\s*$(.*?)(?=^\.SH |\Z)' % re.escape(name), text, re.M | re.S)
    lines = m.group(1).splitlines() if m else []
    heads = [ln for i, ln in enumerate(lines)
             if not ln.startswith('.') and
             ((i + 1 < len(lines) and lines[i + 1].startswith('.RS')) or
              (i > 0 and lines[i - 1].startswith('.TP')))]
    return '\n'.join(heads)


def help_of(argv):
    """What argv (a --help invocation) prints; it must exit 0 and print something."""
    p = ckfs.run(argv, timeout=30)
    if p.returncode != 0 or not p.stdout.strip():
        raise AssertionError('%s exited %d with %d bytes of output: %s'
                             % (' '.join(argv), p.returncode, len(p.stdout), p.stderr))
    return p.stdout


def help_flags(text):
    """Flags of a help text: those on option lines (first non-blank character '-') and the
    bracketed ones of its usage line."""
    flags = set()
    for line in text.splitlines():
        s = line.strip()
        if s.startswith('-'):
            flags.update(re.findall(FLAG, s))
        elif s.startswith('usage:'):
            flags.update(re.findall(r'\[' + FLAG, s))
    return flags


def help_commands(text):
    """Commands of ckptctl's help: the first column of the lines of its 'commands:' block.
    'pin STEP, unpin STEP' gives pin and unpin; 'remote [verify|gc]' gives remote,
    'remote verify' and 'remote gc'. Operands are upper case and not commands."""
    cmds = []
    block = False
    for line in text.splitlines():
        if re.match(r'^\S.*:\s*$', line):
            block = line.strip() == 'commands:'
            continue
        if not block or not re.match(r'^  \S', line):
            continue
        col = re.split(r'\s{2,}', line.strip())[0]
        subs = [w for b in re.findall(r'\[([^\]]*)\]', col)
                for w in re.findall(r'\b[a-z][a-z0-9-]*\b', b)]
        names = re.findall(r'\b[a-z][a-z0-9-]*\b', re.sub(r'\[[^\]]*\]', ' ', col))
        for n in names:
            if n not in cmds:
                cmds.append(n)
        cmds += ['%s %s' % (names[0], s) for s in subs if names]
    return cmds


def documented_flag(body, flag):
    return re.search(r'(?<![\w-])%s(?![\w-])' % re.escape(flag), body) is not None


def documented_o(body, name):
    return re.search(r'(?<![\w-])-o\s+%s(?!\w)' % re.escape(name), body) is not None


def command_entry(heads, cmd):
    """Is cmd ('status', 'remote gc') the start of one of the entry headings heads?"""
    pat = r'\s+'.join(re.escape(w) for w in cmd.split())
    return re.search(r'^%s(?![\w-])' % pat, heads, re.M) is not None


class TestManPages(unittest.TestCase):
    def render(self, path, program):
        """man -l path at 80 columns: no warnings, NAME/SYNOPSIS/OPTIONS present."""
        env = dict(os.environ, MANWIDTH='80', MANPAGER='cat', PAGER='cat', LC_ALL='C.UTF-8')
        env.pop('MAN_KEEP_FORMATTING', None)
        try:
            p = ckfs.run(['man', '--warnings', '-l', path], timeout=60, env=env)
        except FileNotFoundError:
            raise AssertionError('man not found: install Debian package man-db') from None
        out = re.sub(r'.\x08', '', p.stdout)
        self.assertEqual(p.returncode, 0, 'man -l %s exited %d: %s' % (path, p.returncode,
                                                                      p.stderr))
        self.assertTrue(out.strip(), 'man -l %s rendered nothing: %s' % (path, p.stderr))
        self.assertEqual(p.stderr.strip(), '', 'man -l %s: groff warnings:\n%s'
                         % (path, p.stderr))
        missing = [s for s in ('NAME', 'SYNOPSIS', 'OPTIONS')
                   if not re.search(r'^%s\s*$' % s, out, re.M)]
        self.assertEqual(missing, [], 'man -l %s has no section(s) %s; rendered:\n%s'
                         % (path, ', '.join(missing), out[:2000]))
        name = re.search(r'^NAME\s*\n\s+(\S+)', out, re.M)
        self.assertTrue(name and name.group(1) == program,
                        'the NAME section of %s does not name %s' % (path, program))

    def test_ckptfs_page(self):
        path = page_path('ckptfs.8')
        self.render(path, 'ckptfs')
        text = help_of([ckfs.ckptfs_bin(), '--help'])
        names = sorted(set(re.findall(O_NAME, text)))
        flags = sorted(help_flags(text))
        # the help's shape changed if this finds next to nothing: fail rather than pass empty
        self.assertGreaterEqual(len(names), 10, 'found only -o %s in ckptfs --help:\n%s'
                                % (names, text))
        self.assertTrue({'-h', '--help', '-f'} <= set(flags),
                        'found only %s in ckptfs --help:\n%s' % (flags, text))
        body = entries(roff_text(path), 'OPTIONS')
        self.assertTrue(body, '%s has no entries in an OPTIONS section' % path)
        missing = (['-o ' + n for n in names if not documented_o(body, n)] +
                   [f for f in flags if not documented_flag(body, f)])
        self.assertEqual(missing, [], 'the OPTIONS section of %s (doc/ckptfs.8.scd) has no '
                         'entry for what ckptfs --help prints: %s' % (path, ', '.join(missing)))

    def test_ckptctl_page(self):
        path = page_path('ckptctl.8')
        self.render(path, 'ckptctl')
        ctl = ckfs.ckptctl_bin()
        text = help_of([ctl, '--help'])
        cmds = help_commands(text)
        flags = help_flags(text)
        self.assertGreaterEqual(len(cmds), 10, 'found only commands %s in ckptctl --help:\n%s'
                                % (cmds, text))
        # each command's own help (today the same text; a command's own options would be here)
        for c in [c for c in cmds if ' ' not in c]:
            sub = help_of([ctl, c, '--help'])
            flags.update(help_flags(sub))
            cmds += [x for x in help_commands(sub) if x not in cmds]
        self.assertTrue({'--json', '--help'} <= flags,
                        'found only %s in ckptctl --help:\n%s' % (sorted(flags), text))
        roff = roff_text(path)
        commands, options = entries(roff, 'COMMANDS'), entries(roff, 'OPTIONS')
        self.assertTrue(commands and options, '%s has no entries in a COMMANDS or OPTIONS '
                        'section' % path)
        missing = (['command ' + c for c in cmds if not command_entry(commands, c)] +
                   ['option ' + f for f in sorted(flags) if not documented_flag(options, f)])
        self.assertEqual(missing, [], '%s (doc/ckptctl.8.scd) does not document what ckptctl '
                         '--help prints (commands as entries of COMMANDS, options in OPTIONS): '
                         '%s' % (path, ', '.join(missing)))


if __name__ == '__main__':
    unittest.main()
