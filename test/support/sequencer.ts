import path from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/** The order files start in, all paths relative to the repository's root. */
export interface StartOrder {
  /** Files that start before every other, in this order (a long file that leaves cores idle meanwhile). */
  lead: readonly string[];
  /** The projects, in the order their files start (a project not named starts last). */
  projects: readonly string[];
  /** Within its project, files that start before the project's others, in this order. */
  first: readonly string[];
}

/**
 * `items` (in vitest's order) in the order they start: the lead files, then
 * project by project, each project's named files first; ties keep their order.
 */
export function inStartOrder<T>(
  order: StartOrder,
  items: readonly T[],
  where: (item: T) => { file: string; project: string },
): T[] {
  const at = (list: readonly string[], item: string) => {
    const i = list.indexOf(item);
    return i < 0 ? list.length : i;
  };
  const rank = ({ file, project }: { file: string; project: string }): [number, number, number] => [
    at(order.lead, file),
    at(order.projects, project),
    at(order.first, file),
  ];
  return items
    .map((item, i) => ({ item, i, r: rank(where(item)) }))
    .sort((a, b) => a.r[0] - b.r[0] || a.r[1] - b.r[1] || a.r[2] - b.r[2] || a.i - b.i)
    .map(({ item }) => item);
}

/**
 * Vitest's order (the longest or largest file first) made explicit where
 * it matters: the lead files, then each project's files in the order given,
 * the files named first of their project ahead of the rest. A fresh checkout
 * has no durations to sort by, so a long file that happens to be small would
 * otherwise start last and run on alone at the end.
 */
export function startInOrder(
  order: StartOrder,
): new (
  ...args: ConstructorParameters<typeof BaseSequencer>
) => BaseSequencer {
  return class StartInOrder extends BaseSequencer {
    override async sort(specs: TestSpecification[]): Promise<TestSpecification[]> {
      return inStartOrder(order, await super.sort(specs), (s) => ({
        file: path.relative(s.project.config.root, s.moduleId),
        project: s.project.name,
      }));
    }
  };
}
