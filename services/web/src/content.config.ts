import { defineCollection, z } from 'astro:content';
import { glob } from 'astro/loaders';

/**
 * The site's content collection: help pages and category descriptions, one Markdown file per language
 * (`help/de/karte.md`, `kategorien/en/friedhof.md`). A deployed release's src/content is the target's
 * shared/src/content (deploy-branch.sh links it), so editors change texts without a code change.
 */
const help = defineCollection({
  loader: glob({ pattern: '*/*.md', base: './src/content/help' }),
  schema: z.object({ title: z.string(), order: z.number().default(0) }),
});

const kategorien = defineCollection({
  loader: glob({ pattern: '*/*.md', base: './src/content/kategorien' }),
  schema: z.object({ title: z.string() }),
});

export const collections = { help, kategorien };
