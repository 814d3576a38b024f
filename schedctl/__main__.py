from schedctl.cli import main

main(prog_name="schedctl")
