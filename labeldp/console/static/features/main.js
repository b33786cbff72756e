// The features party's (publisher's) console: senders, received releases and models, feature tables,
// joins, training jobs with live progress, models with their metrics, artifact and predictions. Every
// view reads the public REST API (docs/console.md lists which route).

import { start } from "../common/app.js";
import { joinsPage } from "./joins.js";
import { modelPage, modelsPage } from "./models.js";
import { receivedModelPage, receivedModelsPage } from "./received_models.js";
import { receivedReleasePage, receivedReleasesPage } from "./received_releases.js";
import { sendersPage } from "./senders.js";
import { tablesPage } from "./tables.js";
import { jobPage, trainingPage } from "./training.js";

start({
  title: "features party (publisher)",
  home: "#/releases",
  nav: [
    ["#/releases", "Received releases"],
    ["#/tables", "Feature tables"],
    ["#/joins", "Joins"],
    ["#/training", "Training"],
    ["#/models", "Models"],
    ["#/semi-sensitive-models", "Received models"],
    ["#/senders", "Senders"],
  ],
  routes: [
    [/^\/releases$/, receivedReleasesPage],
    [/^\/releases\/([^/]+)$/, receivedReleasePage],
    [/^\/tables$/, tablesPage],
    [/^\/joins$/, joinsPage],
    [/^\/training$/, trainingPage],
    [/^\/jobs\/([^/]+)$/, jobPage],
    [/^\/models$/, modelsPage],
    [/^\/models\/([^/]+)$/, modelPage],
    [/^\/semi-sensitive-models$/, receivedModelsPage],
    [/^\/semi-sensitive-models\/([^/]+)$/, receivedModelPage],
    [/^\/senders$/, sendersPage],
  ],
});
