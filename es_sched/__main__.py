from es_sched.cli.main import main

main()
