#!/usr/bin/python3
"""ckptctl's help for the user (issue 44): `ckptctl help [COMMAND]` and `ckptctl [STORE] COMMAND
--help` print the command's own usage and options (exit 0), a mistyped command gets a
suggestion, the short usage names every command of the table, export suggests --force only when
it would export something, and the bash completion offers each live step once.

HelpTest needs no mount; LiveStepsTest makes a store with a pruned step and a step name recorded
twice through a real mount (-o keep_checkpoint_max=1), plain files in Megatron-LM's layout.

Run: /usr/bin/python3 tests/tools/test_ckptctl_help.py   (CKPTFS_BIN / CKPTCTL_BIN name the
binaries)
"""

import sys
import os

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import faulthandler  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import unittest  # noqa: E402

import ckfs  # noqa: E402
from ckfs import TRACKER, content, wait_for  # noqa: E402

COMPLETION = os.path.join(HERE, '..', '..', 'dist', 'ckptctl.bash-completion')
BASH_COMPLETION = '/usr/share/bash-completion/bash_completion'

# every command of the table, with an option only it takes (None: none of its own)
COMMANDS = {
    'status': None, 'ls': None, 'verify': None, 'gc': '--dry-run', 'fsck': '--rebuild',
    'steps': None, 'show': None, 'pin': None, 'unpin': None, 'drop': None, 'rollback': None,
    'export': '--include', 'diff': None, 'claims': None, 'import': '--dest',
    'remote': '--repair',
}


def ctl(*args):
    return ckfs.run([ckfs.ckptctl_bin()] + list(args), timeout=60)


class HelpTest(unittest.TestCase):
    def test_help_is_global_usage(self):
        """`ckptctl help` said "missing COMMAND" (exit 2); it is the global usage, as --help."""
        full = ctl('--help')
        self.assertEqual(full.returncode, 0, full.stderr)
        r = ctl('help')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, full.stdout)
        self.assertTrue(r.stdout.startswith('usage: ckptctl '), r.stdout)
        for c in COMMANDS:
            self.assertRegex(r.stdout, r'(?m)^  %s\b' % c, 'command %s not in the help' % c)

    def test_command_help(self):
        """`ckptctl STORE status --help` printed the global help; every command has its own,
        from `help CMD`, `CMD --help` and `STORE CMD --help` alike, naming its own options."""
        glob = ctl('--help').stdout
        for c, own in COMMANDS.items():
            outs = []
            for argv in (('help', c), (c, '--help'), ('/no/such/store', c, '--help'),
                         ('--help', '/no/such/store', c)):
                r = ctl(*argv)
                self.assertEqual(r.returncode, 0, '%s: %s' % (argv, r.stderr))
                outs.append(r.stdout)
            self.assertEqual(len(set(outs)), 1, 'help of %s differs by how it is asked' % c)
            text = outs[0]
            self.assertNotEqual(text, glob, '%s --help prints the global help' % c)
            first = text.splitlines()[0]
            self.assertRegex(first, r'^usage: ckptctl .*STORE %s\b' % c, text)
            self.assertIn('--json', text)
            if own:
                self.assertIn(own, text, '%s --help does not name %s' % (c, own))
            # options of other commands are not offered
            for other, oo in COMMANDS.items():
                if oo and oo != own and not (c == 'remote' and oo == '--dry-run'):
                    self.assertNotIn(oo, text, '%s --help names %s of %s' % (c, oo, other))
        r = ctl('help', 'help')
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_typo_suggestion(self):
        """A typo got "unknown command 'stauts'" and nothing else."""
        for typed, meant in (('stauts', 'status'), ('verfy', 'verify'), ('exprot', 'export'),
                             ('stpes', 'steps'), ('rmote', 'remote')):
            r = ctl('/no/such/store', typed)
            self.assertEqual(r.returncode, 2)
            self.assertIn("unknown command '%s'; did you mean '%s'?" % (typed, meant),
                          r.stderr)
            r = ctl('help', typed)
            self.assertEqual(r.returncode, 2)
            self.assertIn("did you mean '%s'?" % meant, r.stderr)
        r = ctl('/no/such/store', 'frobnicate')
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown command 'frobnicate'", r.stderr)
        self.assertNotIn('did you mean', r.stderr)
        r = ctl('--forse', '/no/such/store', 'export', '1', '/tmp/x')
        self.assertEqual(r.returncode, 2)
        self.assertIn("did you mean '--force'?", r.stderr)

    def test_short_usage_names_every_command(self):
        """The short usage printed on a usage error omitted fsck (a second, hand-kept list)."""
        r = ctl('/no/such/store')
        self.assertEqual(r.returncode, 2)
        self.assertIn('missing COMMAND', r.stderr)
        usage = r.stderr[r.stderr.index('usage:'):]
        for c in COMMANDS:
            self.assertRegex(usage, r'(?<![\w-])%s(?![\w-])' % c, 'short usage lacks %s' % c)
        r = ctl('status')
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing STORE before command 'status'", r.stderr)

    def test_option_of_another_command(self):
        r = ctl('--include', '*.pt', '/no/such/store', 'status')
        self.assertEqual(r.returncode, 2)
        self.assertIn("'--include' is an option of 'export' only", r.stderr)
        r = ctl('--dry-run', '/no/such/store', 'status')
        self.assertIn("'--dry-run' is an option of 'gc' and 'remote gc' only", r.stderr)


def megatron_save(m, step, files):
    """Megatron-LM's save of step through mount m: the directory, each file, then the tracker
    (plain bytes: no structure check applies to .bin)."""
    d = m.path('iter_%07d' % step)
    os.makedirs(d)
    for rel, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
        with open(os.path.join(d, rel), 'wb') as f:
            f.write(data)
    with open(m.path(TRACKER), 'w') as f:
        f.write(str(step))


class LiveStepsTest(ckfs.CkptctlCase, unittest.TestCase):
    """A store whose steps list holds iter_0000005 (pruned only) and iter_0000010 twice (pruned,
    then saved again and complete), and iter_0000020 (complete)."""

    @classmethod
    def setUpClass(cls):
        cls.m = m = ckfs.Mount(opts=('keep_checkpoint_max=1',)).start()
        try:
            def steps():
                return ckfs.ckptctl(m.store, 'steps', json_out=True).stdout

            def state_of(name, state):
                return any(s['name'] == name and s['state'] == state
                           for s in json.loads(steps() or '{"steps": []}')['steps'])
            for step, prev in ((5, None), (10, 5), (20, 10)):
                megatron_save(m, step, {'mp_rank_00/model.bin': content('s%d' % step, 300000)})
                m.settle()
                wait_for('step %d complete' % step,
                         lambda: state_of('iter_%07d' % step, 'complete'), 30, steps)
                if prev:
                    wait_for('step %d pruned' % prev,
                             lambda: state_of('iter_%07d' % prev, 'pruned'), 30, steps)
            # step 10 saved again (a rollback by the trainer): a second record named iter_0000010
            megatron_save(m, 10, {'mp_rank_00/model.bin': content('s10b', 300000)})
            m.settle()
            wait_for('step 10 complete again', lambda: state_of('iter_0000010', 'complete'), 30,
                     steps)
        except BaseException:
            m.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def test_export_force_hint(self):
        """`export 5` (pruned, no directory) suggested --force, which then said there was
        nothing to export."""
        dest = os.path.join(self.m.tmp, 'x')
        r = self.ctl('export', '5', dest, rc=2)
        self.assertNotIn('--force', r.stderr)
        self.assertIn('nothing to export', r.stderr)
        r = self.ctl('--force', 'export', '5', dest, rc=2)
        self.assertIn('nothing to export', r.stderr)
        self.assertFalse(os.path.exists(os.path.join(dest, 'iter_0000005')))

    def complete(self, *words):
        """COMPREPLY of the bash completion for `ckptctl words...` (the last word being
        completed), with the built ckptctl first on PATH."""
        if not shutil.which('bash') or not os.path.exists(BASH_COMPLETION):
            self.fail('bash and %s are needed (Debian package bash-completion)'
                      % BASH_COMPLETION)
        b = ckfs.ckptctl_bin()
        script = r'''
source %s
source "$1"
shift
COMP_WORDS=("$@")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="${COMP_WORDS[*]}"
COMP_POINT=${#COMP_LINE}
_ckptctl ckptctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%%s\n' "${COMPREPLY[@]}"
''' % BASH_COMPLETION
        env = dict(os.environ, PATH=os.path.dirname(b) + ':' + os.environ.get('PATH', ''))
        r = ckfs.run(['bash', '-c', script, 'bash', COMPLETION, 'ckptctl'] + list(words),
                     env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [w for w in r.stdout.splitlines() if w]

    def test_completion_live_steps_once(self):
        """The completion offered pruned steps, and a name once per record."""
        steps = self.ctl('steps', json_out=True)['steps']
        names = [s['name'] for s in steps]
        self.assertIn('iter_0000005', names)
        self.assertEqual(names.count('iter_0000010'), 2, steps)
        for cmd in ('show', 'pin', 'export', 'diff', 'drop', 'rollback'):
            got = self.complete(self.m.store, cmd, 'iter')
            self.assertEqual(sorted(w for w in got if w.startswith('iter_')),
                             ['iter_0000010', 'iter_0000020'], cmd)
        # commands come from ckptctl's own table: none missing (drop, rollback, diff were)
        got = self.complete(self.m.store, '')
        self.assertEqual(sorted(got), sorted(COMMANDS), got)
        got = self.complete(self.m.store, 'export', '--')
        self.assertIn('--include', got)
        self.assertEqual(len(got), len(set(got)), got)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
