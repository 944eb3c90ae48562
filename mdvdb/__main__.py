from mdvdb.cli import main

main()
