// deepagents' standard cases with relative paths (NAME), as Daytona's
// wiring gives them: TetherSandbox takes them from its working directory.
import { standardSuite } from "./standard.js";

standardSuite({ name: "relative", resolvePath: (name) => name });
