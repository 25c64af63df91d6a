import path from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * Vitest's order (groups, then projects, then the longest or largest file
 * first), except that the files named here, relative to the repository's
 * root, start before the others of their project. A fresh checkout has no
 * durations to sort by, so a long file that happens to be small would
 * otherwise start last and run on alone at the end.
 */
export function startFirst(
  files: readonly string[],
): new (
  ...args: ConstructorParameters<typeof BaseSequencer>
) => BaseSequencer {
  return class StartFirst extends BaseSequencer {
    override async sort(specs: TestSpecification[]): Promise<TestSpecification[]> {
      const sorted = await super.sort(specs);
      const projects = new Map<string, number>();
      for (const s of sorted) if (!projects.has(s.project.name)) projects.set(s.project.name, projects.size);
      const project = (s: TestSpecification) => projects.get(s.project.name) ?? 0;
      const rank = (s: TestSpecification) => {
        const i = files.indexOf(path.relative(s.project.config.root, s.moduleId));
        return i < 0 ? files.length : i;
      };
      return sorted
        .map((s, i) => ({ s, i }))
        .sort((a, b) => project(a.s) - project(b.s) || rank(a.s) - rank(b.s) || a.i - b.i)
        .map(({ s }) => s);
    }
  };
}
