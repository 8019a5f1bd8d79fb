/**
 * The tail of a command's module (sites-restart, build-submit): when the module is the process's entry
 * point, and not imported by a test or another module, run `main` with the command line's arguments
 * and exit with the code it returns; an error is printed and exits 1.
 *
 * It lives in infra/sites because the one image running these commands copies infra/sites and
 * infra/builder and nothing else of infra/ (webhook.Dockerfile); infra/builder already imports from here.
 */
export function runAsCommand(moduleUrl: string, main: (argv: string[]) => Promise<number>): void {
  if (moduleUrl !== `file://${process.argv[1]}`) return;
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
