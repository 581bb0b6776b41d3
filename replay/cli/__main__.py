from replay.cli.app import main
main()
