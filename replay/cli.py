"""The `replay` command line."""
import sys

def main(argv=None) -> int:
  print("replay: not implemented yet", file=sys.stderr)
  return 2

if __name__ == "__main__": sys.exit(main())
