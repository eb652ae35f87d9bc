"""Running the CLI in-process, as a user would from a shell."""
from hyperscalees.cli.main import main


def invoke(argv, capsys):
    """(exit code, stdout, stderr) of ``hyperscalees *argv``, whether it returns or exits."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err
