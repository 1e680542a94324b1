;;; forj-chat.el --- The conversation buffer and the tool loop  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; `M-x forj' opens (or returns to) `*forj: PROJECT*', a conversation
;; with a language model about the current project.
;;
;; The record is the chat's list of entries (`forj-session-record'): each
;; holds its part of the conversation as a Markdown transcript, divided
;; by role headings:
;;
;;   ## User           what the user wrote
;;   ## Assistant      what the model wrote, tool-call blocks included
;;   ## Tool results   a header line per call and its tool-result block,
;;                     the worker's JSON exactly as it was journaled
;;
;; What the model reads on every turn is parsed from that transcript;
;; the buffer is a view of it.  The view draws results for people
;; (forj-render.el) and the model's tool calls as one readable line
;; each, their JSON folded away; `forj-show-raw-result' shows the JSON.
;; Everything above the input (a marker after the last `## User'
;; heading) is read-only; links and folds work there, and
;; `forj-edit-message' forks the conversation from an earlier message.
;; `C-c C-c' sends the input; `C-c C-m' (or `C-c ?') opens `forj-menu',
;; a menu of everything else.  Replies stream in above the prompt, so
;; the user can draft the next message meanwhile.  A heading line
;; inside a reply or a message is escaped with a backslash, so only
;; forj's own headings divide the record.  Lines starting with
;; "⚠ forj:" are notices for the user (errors, stops) and are not sent
;; to the model.
;;
;; The tool loop: when a reply ends with tool-call blocks, they run as
;; one batch through forj-tools.el (plan,
;; review, execute, results drawn under `## Tool results') and the
;; model is resumed with the results, at most
;; `forj-chat-max-tool-iterations' times per user message (the worker's
;; configuration when nil); past that, new calls are answered "Max tool
;; iterations reached" and the model is resumed once more to answer,
;; and `forj-continue' (`C-c C-j') lets it go on.  A reply cut by the
;; token limit runs none of its calls and `forj-continue' asks the model
;; to go on from the cut; a refusal is shown with the provider's reason.
;; `forj-retry' (`C-c C-a') asks for the last reply again, with another
;; model after `forj-set-model' (or with a prefix argument).  `C-c C-k'
;; stops the stream, a retry's wait, or the batch, and does not resume.  The tools mode (`forj-chat-tools-mode')
;; may also be parse-only (calls wait for `M-x forj-tool-result') or
;; disabled (no tools advertised; calls answered as invalid).
;;
;; `M-x forj-save' writes the transcript to a file; visiting that file
;; again (its first line names the project) reopens it as a chat, record
;; and view.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-session)
(require 'forj-worker)
(require 'forj-tools)
(require 'forj-render)
(require 'imenu)
(require 'forj-provider)
(require 'forj-provider-openai)
(require 'forj-provider-anthropic)
(require 'forj-provider-gemini)
(require 'forj-provider-scripted)
(require 'forj-markdown)
(require 'forj-models)
(require 'forj-usage)
(require 'forj-context)
(require 'forj-compact)

(autoload 'forj-menu "forj-menu" "Open the menu of everything forj can do from here." t)
(autoload 'forj-tasks "forj-tasks" "Show the project's todos and tasks in a side window." t)
(autoload 'forj-setup "forj-setup" "Set up a language model provider: a hosted one's API key, or a local server." t)
(autoload 'forj-set-mode "forj-permissions" "Set the permission mode of this chat." t)
(autoload 'forj-permissions "forj-permissions" "List the permissions in force, and revoke grants." t)
(autoload 'forj-audit "forj-audit" "List the tool calls journaled for a project." t)

;;; Options

(defcustom forj-chat-tools-mode 'enabled
  "How the chat handles the model's tool calls.
`enabled': validate, review and execute them, then resume the model.
`parse-only': list them as pending; nothing runs until the user gives
each its result with `forj-tool-result'.
`disabled': advertise no tools; calls are answered as invalid."
  :type '(choice (const :tag "Enabled" enabled)
                 (const :tag "Parse only" parse-only)
                 (const :tag "Disabled" disabled))
  :group 'forj)

(defcustom forj-chat-max-tool-iterations nil
  "How many tool batches one user message may lead to; nil: the worker's config.
nil follows max_tool_iterations_per_user_turn in the [tools] section
of forj's configuration (4 unless set).  Past the limit, new calls are
answered that the limit is reached, the model is asked once more to
answer without tools, and `forj-continue' lets it go on."
  :type '(choice (const :tag "As the worker's configuration says" nil)
                 (natnum :tag "Batches"))
  :group 'forj)

(defcustom forj-chat-extra-instructions nil
  "Text added to the end of the system prompt, or nil."
  :type '(choice (const :tag "None" nil) string)
  :group 'forj)

(defcustom forj-chat-context-bytes (* 400 1024)
  "An estimate of the model's context, in bytes of text.
Tool results are cut to fit what is left of it."
  :type 'natnum
  :group 'forj)

(defcustom forj-chat-directory (locate-user-emacs-file "forj/chats/")
  "Where `forj-save' puts chats that have no file yet."
  :type 'directory
  :group 'forj)

(defun forj-chat-set-tools-mode (mode)
  "Set the tools mode of this chat to MODE, from the next request on.
MODE is `enabled', `parse-only' or `disabled', as for
`forj-chat-tools-mode'; it holds for this chat only."
  (interactive
   (list (intern (completing-read (format "Tools mode of this chat (now %s): " forj-chat-tools-mode)
                                  '("enabled" "parse-only" "disabled") nil t))))
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (memq mode '(enabled parse-only disabled))
    (user-error "Unknown tools mode `%s'; choose enabled, parse-only or disabled" mode))
  (setq-local forj-chat-tools-mode mode)
  (force-mode-line-update)
  (message "forj: tools mode of this chat: %s" mode))

(defface forj-chat-heading
  '((t :inherit font-lock-keyword-face :weight bold :height 1.1))
  "Face for the role headings of a chat."
  :group 'forj)

(defface forj-chat-notice
  '((t :inherit warning))
  "Face for forj's notices in a chat (not sent to the model)."
  :group 'forj)

;;; Buffer state

(defvar-local forj-chat--out nil "Marker: where the turn's output goes.")
(defvar-local forj-chat--reply-start nil "Marker: the start of the reply being streamed.")
(defvar-local forj-chat--input nil
  "Marker: the start of the user's input.  Everything before it is history.")
(defvar-local forj-chat--reply-view nil
  "Marker: where the view of the reply being streamed starts.")
(defvar-local forj-chat--wait nil
  "A retry being waited for, or nil.
A plist (:at TIME :attempt N :message M :overlay O :timer T).")



(defvar forj-chat-record-changed-hook nil
  "Run in a chat buffer after its record changed (an entry added, or cut back).")

(defvar forj-chat-worker-ready-functions nil
  "Called with the worker in a chat buffer each time its worker is ready.")

(defvar forj-chat-batch-interrupted-function nil
  "Called with the entries, results and batch whose worker died, or nil.
It takes over the turn: the results are not recorded, and the model is
not resumed, until the interrupted batch is resolved.")

(defun forj-chat-id ()
  "This chat's id, made on first use: a timestamp and random hex."
  (or (forj-session-id forj-session)
      (setf (forj-session-id forj-session) (format "%s-%s" (format-time-string "%Y%m%dT%H%M%S")
                                  (substring (secure-hash 'sha256 (format "%s%s%s" (random) (float-time)
                                                                          (emacs-pid)))
                                             0 8)))))

(defun forj-chat-new-turn-id ()
  "A new turn id for a user message of this chat (also continue and retry)."
  (format "%s.%s" (forj-chat-id)
          (substring (secure-hash 'sha256 (format "%s%s%s" (random) (float-time) (length (forj-session-record forj-session))))
                     0 8)))

(defconst forj-chat--heading-re "^## \\(User\\|Assistant\\|Tool results\\)$"
  "A role heading line.")

(defconst forj-chat--notice-prefix "⚠ forj: "
  "The start of a notice line.")

;;; The mode

(defalias 'forj-chat--parent-mode
  (if (require 'markdown-mode nil t) 'gfm-mode 'text-mode)
  "The major mode chats build on: `gfm-mode' when installed.")

(defvar forj-chat-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'forj-chat-send)
    (define-key map (kbd "C-c C-k") #'forj-chat-stop)
    (define-key map (kbd "C-c C-r") #'forj-tool-result)
    (define-key map (kbd "C-c C-o") #'forj-tools-toggle-fold)
    (define-key map (kbd "C-c C-j") #'forj-continue)
    (define-key map (kbd "C-c C-a") #'forj-retry)
    ;; In a terminal C-c C-m is C-c RET: both open the menu.
    (define-key map (kbd "C-c C-m") #'forj-menu)
    (define-key map (kbd "C-c ?") #'forj-menu)
    (define-key map (kbd "C-c C-v") #'forj-tasks)
    map)
  "Keymap of `forj-chat-mode'.")

(defvar forj-chat-documented-keymaps
  '(("In the chat" . forj-chat-mode-map))
  "The keymaps whose keys `describe-mode' lists in a chat, with a title each.
Each element is (TITLE . KEYMAP-VARIABLE); a variable not yet bound is
skipped.")

;;;###autoload
(define-derived-mode forj-chat-mode forj-chat--parent-mode "forj"
  "A conversation with a language model about a project.
\\<forj-chat-mode-map>
Type below the last \"## User\" heading and send with \\[forj-chat-send].
\\[forj-chat-stop] stops the reply or the running tools, and
\\[forj-menu] opens a menu of everything else.

\\{forj-chat-mode-map}"
  ;; Started again, the mode keeps the chat's id and record only.
  (setq forj-session (forj-session-renew forj-session))
  (font-lock-add-keywords nil `((,forj-chat--heading-re 0 'forj-chat-heading t)
                                (,(concat "^" forj-chat--notice-prefix ".*$") 0 'forj-chat-notice t)))
  (unless (derived-mode-p 'markdown-mode) (forj-markdown-setup))
  (setq-local header-line-format '(:eval (forj-chat--header-line)))
  (add-hook 'completion-at-point-functions #'forj-context-complete-at-point nil t)
  (forj-chat--setup-view)
  (forj-chat--read-metadata))

;;;###autoload
(add-to-list 'magic-mode-alist '("<!-- forj-chat " . forj-chat-mode))

(defun forj-chat--bindings (map prefix)
  "The command bindings of MAP (not of its parents) as (KEYS . COMMAND) pairs.
PREFIX, a vector, is the key sequence leading to MAP."
  (let ((found nil))
    ;; A keymap lists its latest bindings first: reversed, they come in
    ;; the order they were defined.
    (map-keymap-internal
     (lambda (event binding)
       (let ((keys (vconcat prefix (vector event))))
         (cond ((keymapp binding)
                (setq found (append (forj-chat--bindings
                                     (if (symbolp binding) (symbol-function binding) binding)
                                     keys)
                                    found)))
               ((and (symbolp binding) (commandp binding))
                (push (cons keys binding) found)))))
     map)
    found))

(defun forj-chat--command-summary (command)
  "The first line of COMMAND's docstring, or a note that it has none yet."
  (let ((doc (ignore-errors (documentation command t))))
    (cond ((not (fboundp command)) (format "`%s' (not loaded yet)" command))
          ((and doc (not (string-empty-p doc))) (car (split-string doc "\n")))
          (t (format "`%s'" command)))))

(defun forj-chat--mode-documentation ()
  "The documentation of `forj-chat-mode': its docstring's start, and every key.
Each key of `forj-chat-documented-keymaps' is listed with the first
line of its command's docstring."
  ;; The function's own docstring: the symbol's documentation is this.
  (let ((intro (car (split-string (or (documentation (symbol-function 'forj-chat-mode) t) "")
                                  "\n\\\\{" t))))
    (concat
     (string-trim-right (or intro ""))
     "\n"
     (mapconcat
      (lambda (entry)
        (let ((map (and (boundp (cdr entry)) (symbol-value (cdr entry)))))
          (if (not (keymapp map))
              ""
            (concat "\n" (car entry) ":\n\n"
                    (mapconcat (lambda (binding)
                                 (format "%-10s `%s': %s"
                                         (key-description (car binding))
                                         (cdr binding)
                                         (forj-chat--command-summary (cdr binding))))
                               (forj-chat--bindings map [])
                               "\n")
                    "\n"))))
      forj-chat-documented-keymaps "")
     "\n\\<forj-chat-mode-map>The menu (\\[forj-menu]) shows the rest; \\[customize-group] forj lists the settings.")))

;; `describe-mode' (C-h m) and `describe-function' show every key of the
;; chat with what it does, from the keymaps as they are now.
(put 'forj-chat-mode 'function-documentation '(forj-chat--mode-documentation))

(defun forj-chat--header-line ()
  "The header line: provider, model, sandbox, tools and permission modes, state.
Then tokens, cost and context use (`forj-compact-header')."
  (format " forj · %s %s · %s · tools: %s · mode: %s · %s · %s"
          (or (plist-get (forj-session-provider forj-session) :name) "no provider")
          (or (plist-get (forj-session-provider forj-session) :model) "")
          (if (forj-session-root forj-session)
              (forj-worker-sandbox-description (forj-worker-get (forj-session-root forj-session)))
            "commands: no project")
          (forj-chat-effective-tools-mode)
          (forj-chat-permission-mode)
          (forj-compact-header)
          (pcase (forj-session-state forj-session)
            ((guard forj-chat--wait) (forj-chat--wait-text))
            ('streaming "receiving…")
            ('tools "running tools…")
            (_ (substitute-command-keys "\\<forj-chat-mode-map>\\[forj-chat-send] to send")))))

(defun forj-chat--hello ()
  "The hello reply of this chat's running worker, or nil."
  (let ((worker (and (forj-session-root forj-session) (forj-worker-get (forj-session-root forj-session)))))
    (and worker (forj-worker-hello worker))))

(defun forj-chat-permission-mode ()
  "The permission mode of this chat, as text.
Its own (`forj-set-mode'), else the worker's configured default, else
\"ask\" until the worker has said."
  (or forj-tools-permission-mode
      (plist-get (plist-get (forj-chat--hello) :permissions) :mode)
      "ask"))

(defun forj-chat-effective-tools-mode ()
  "The tools mode in force: the stricter of the chat's and the worker's.
The chat's is `forj-chat-tools-mode'; the worker's is `[tools] mode'
of its configuration."
  (let* ((order '(disabled parse-only enabled))
         (configured (plist-get (plist-get (plist-get (plist-get (forj-chat--hello) :config) :effective)
                                           :tools)
                                :mode))
         (theirs (pcase configured ("disabled" 'disabled) ("parse_only" 'parse-only) (_ 'enabled)))
         (ours (if (memq forj-chat-tools-mode order) forj-chat-tools-mode 'enabled)))
    (if (< (cl-position theirs order) (cl-position ours order)) theirs ours)))

(defun forj-chat-load-tools (worker &optional then)
  "Take this chat's tools from WORKER for its permission mode, then call THEN.
The tools are those `tool_definitions' gives for the chat's mode (the
configured mode's, in hello, when the chat has none of its own), so a
read-only chat never shows the model a tool that writes."
  (let ((buffer (current-buffer))
        (turn (forj-session-turn forj-session))
        (hello (forj-worker-hello worker)))
    (if (null forj-tools-permission-mode)
        (progn
          (setf (forj-session-tools forj-session) (plist-get hello :tools)
                (forj-session-permission-instructions forj-session)
                (append (plist-get (plist-get hello :permissions) :instructions) nil))
          (when then (funcall then)))
      (forj-epc-call
       (forj-worker-connection worker) "tool_definitions"
       (list :permission_mode forj-tools-permission-mode)
       :success (lambda (reply)
                  (when (buffer-live-p buffer)
                    (with-current-buffer buffer
                      (forj-chat--take-tools reply)
                      (when (and then (= turn (forj-session-turn forj-session))) (funcall then)))))
       :error (lambda (err)
                (when (buffer-live-p buffer)
                  (with-current-buffer buffer
                    (forj-chat--notice (format "the worker could not list the tools of mode %s: %s"
                                               forj-tools-permission-mode
                                               (or (plist-get err :message) err)))
                    (when (and then (= turn (forj-session-turn forj-session))) (forj-chat--end-turn)))))))))

(defun forj-chat--take-tools (reply)
  "Use the tools of a `tool_definitions' REPLY from now on; show its mode note."
  (setf (forj-session-tools forj-session) (plist-get reply :tools)
        (forj-session-permission-instructions forj-session) (append (plist-get reply :instructions) nil))
  (let ((mode (plist-get reply :permission_mode)))
    (when (and (stringp mode) (not (equal mode forj-tools-permission-mode)))
      (setq forj-tools-permission-mode mode)))
  (when (stringp (plist-get reply :mode_note))
    (forj-chat--notice (plist-get reply :mode_note)))
  (force-mode-line-update))

(defun forj-chat--turn-stops (batch)
  "Take in what the worker said of the turn after BATCH; non-nil if the loop stops.
A batch of `continue_loop' tools does not count toward the iteration
limit; after an `exit_loop' tool the loop hands back to the user."
  (let* ((consent (and batch (forj-tools-batch-consent batch)))
         (state (plist-get consent :turn)))
    (when (and state (listp state))
      (setf (forj-session-turn-state forj-session) (cons (forj-session-turn forj-session) state))
      (when (or (eq (plist-get state :continue_loop) t)
                (eq (plist-get (plist-get consent :plan-turn) :continue_loop) t))
        (setf (forj-session-iterations forj-session) (max 0 (1- (forj-session-iterations forj-session)))))
      (when (eq (plist-get state :exit_loop) t)
        (forj-chat--notice (format "%s ended the tool loop (an exit_loop rule); your turn"
                                   (let ((tool (plist-get state :exit_tool)))
                                     (if (stringp tool) tool "a tool"))))
        t))))

(defun forj-chat--turn-done ()
  "The model ended its turn: end it, unless a rule still waits for tools.
When the worker said the turn may not end yet (`before_exit'), the
model is told its instructions, as a note from forj, within the
iteration limit."
  (let* ((state (and (eq (car (forj-session-turn-state forj-session)) (forj-session-turn forj-session)) (cdr (forj-session-turn-state forj-session))))
         (waiting (append (plist-get state :before_exit) nil))
         (instructions (append (plist-get state :instructions) nil)))
    (setf (forj-session-turn-state forj-session) nil)
    (if (and waiting instructions (not (forj-session-cancelled forj-session))
             (< (forj-session-iterations forj-session) (forj-chat-max-iterations)))
        (progn
          (cl-incf (forj-session-iterations forj-session))
          (forj-chat--tell-model instructions))
      (forj-chat--end-turn))))

(defun forj-chat--tell-model (sentences)
  "Send SENTENCES to the model as a note from forj, then resume it.
The note is a user message of the record, so the transcript holds what
the model read."
  (forj-chat--view-entry
   (forj-chat--record-add
    "user" (concat "\n## User\n\n"
                   (forj-chat--escape (concat "(forj) " (mapconcat #'identity sentences " ")))
                   "\n\n")))
  (forj-chat--request))

(defun forj-chat--metadata-line (root)
  "The first line of a chat about ROOT."
  (format "<!-- forj-chat root: %s -->\n" (abbreviate-file-name root)))

(defun forj-chat--read-metadata ()
  "Take the project root from the chat's first line, if it names one."
  (save-excursion
    (goto-char (point-min))
    (when (looking-at "<!-- forj-chat root: \\(.*?\\) -->")
      (let ((root (expand-file-name (match-string-no-properties 1))))
        (when (file-directory-p root)
          (setf (forj-session-root forj-session) (file-name-as-directory root)
                forj-tools--root (forj-session-root forj-session)
                ;; A chat file from elsewhere (a download, a repository) only
                ;; names a root; the user confirms it before the first send.
                (forj-session-root-confirmed forj-session)
                (and buffer-file-name
                     (file-in-directory-p buffer-file-name forj-chat-directory)))
          (forj-tools-keep-worker t))))))

;;; Entry point

;;;###autoload
(defun forj (&optional directory)
  "Open the chat about the project of DIRECTORY (default: the current one).
An existing chat of the project is shown again."
  (interactive)
  (let* ((root (forj-worker-project-root directory))
         (name (format "*forj: %s*" (file-name-nondirectory (directory-file-name root))))
         (existing (cl-find-if (lambda (b)
                                 (and (eq (buffer-local-value 'major-mode b) 'forj-chat-mode)
                                      (equal (forj-session-root (buffer-local-value 'forj-session b)) root)))
                               (buffer-list))))
    (pop-to-buffer-same-window
     (or existing
         (let ((buffer (generate-new-buffer name)))
           (with-current-buffer buffer
             (insert (forj-chat--metadata-line root))
             (forj-chat-mode)
             (setf (forj-session-root forj-session) root
                   (forj-session-root-confirmed forj-session) t
                   forj-tools--root root)
             (forj-tools-keep-worker t)
             (setf (forj-session-provider forj-session) (forj-chat--choose-provider)))
           buffer)))
    (goto-char (point-max))
    (forj-chat--start-worker)
    (current-buffer)))

(defun forj-chat--start-worker ()
  "Start the chat's worker now, for the first screen to tell how commands run."
  (let ((buffer (current-buffer)))
    (forj-worker-ensure
     (forj-session-root forj-session)
     (lambda (worker)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer (forj-chat--worker-ready worker))))
     (lambda (err)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (forj-chat--notice (format "the tool worker could not start: %s"
                                      (or (plist-get err :message) err)))
           (force-mode-line-update)))))))

(defun forj-chat--worker-ready (worker)
  "Show WORKER's hello warnings as notices, once per worker start."
  (unless (eq (forj-session-greeted forj-session) worker)
    (setf (forj-session-greeted forj-session) worker)
    (dolist (warning (append (plist-get (forj-worker-hello worker) :warnings) nil))
      (when (stringp warning) (forj-chat--notice warning)))
    (run-hook-with-args 'forj-chat-worker-ready-functions worker))
  (force-mode-line-update))

(defun forj-chat--choose-provider ()
  "The provider to use; with none configured, say how to set one, and return nil."
  (or (forj-provider-pick)
      (progn
        (forj-chat--notice
         (format "no language model is set up yet.  M-x forj-setup: choose a provider and paste its key (stored through auth-source), or give a local server's URL (Ollama, llama.cpp).  M-x forj-demo: a recorded session on a sample project, with no key and no network.  (Keys are also read from %s.)"
                 (string-join (forj-provider-key-variables) ", ")))
        nil)))

(defconst forj-chat--demo-directory
  (expand-file-name "demo/" (file-name-directory
                             (directory-file-name (file-name-directory
                                                   (or load-file-name buffer-file-name)))))
  "The demo's files in the forj checkout.")

;;;###autoload
(defun forj-demo ()
  "Open a chat with the scripted provider on a fresh copy of the sample project.
The recorded session reads the project, proposes an edit (you review
its diff) and answers; no key and no network are needed."
  (interactive)
  (let ((dir (file-name-as-directory (make-temp-file "forj-demo-" t))))
    (copy-directory (expand-file-name "project" forj-chat--demo-directory) dir nil nil t)
    (unless (eq 0 (ignore-errors (call-process "git" nil nil nil "-C" dir "init" "-q")))
      ;; project.el finds a root by its .git; an empty one is enough.
      (make-directory (expand-file-name ".git" dir) t))
    (let ((forj-provider "scripted"))
      (with-current-buffer (forj dir)
        (forj-chat--notice
         (format "demo: a copy of the sample project in %s, and a recorded model session.  Type anything and press C-c C-c." dir))
        (current-buffer)))))

;;;###autoload
(defun forj-run (&optional directory)
  "Open the chat on DIRECTORY in the only window, for `make run'.
With no provider set up, the chat's first lines offer `forj-setup'
and `forj-demo', as buttons."
  (prog1 (forj directory)
    (delete-other-windows)))

;;; Notices

(defun forj-chat--notice (text)
  "Show TEXT as a notice line in the chat, just before the prompt.
A notice is kept in the record (and saved) but never sent to the model.
While a reply streams or tools run, it waits until they are done: the
record keeps the order in which the view shows things."
  (let ((line (concat forj-chat--notice-prefix
                      (substring-no-properties
                       (forj-review-mark-invisible (replace-regexp-in-string "\n" " " text)))
                      "\n")))
    (if (or forj-chat--reply-view (eq (forj-session-state forj-session) 'tools))
        (push line (forj-session-held-notices forj-session))
      (forj-chat--add-notice line))))

(defun forj-chat--add-notice (line)
  "Add the notice LINE to the record and the view."
  (let ((transcript (forj-chat--transcript)))
    (forj-chat--view-entry
     (forj-chat--record-add "notice" (concat (if (or (string-empty-p transcript)
                                                     (string-suffix-p "\n" transcript))
                                                 ""
                                               "\n")
                                             line)))))

(defconst forj-chat--notice-commands
  '(forj-setup forj-demo forj-continue forj-retry forj-set-model forj-worker-log)
  "Commands a notice may offer as a button, by naming them after \\[execute-extended-command].
Only these: a notice can carry text from a project's configuration.")

(defun forj-chat--notice-buttons (beg end)
  "Make buttons of the commands named between BEG and END after \\[execute-extended-command].
Only the commands of `forj-chat--notice-commands'."
  (save-excursion
    (goto-char beg)
    (while (re-search-forward "M-x \\(forj-[a-z-]+\\)" end t)
      (let ((command (intern-soft (match-string-no-properties 1))))
        (when (memq command forj-chat--notice-commands)
          (make-text-button (match-beginning 0) (match-end 0)
                            'action (lambda (_button) (call-interactively command))
                            'help-echo (format "Run %s" command)
                            'follow-link t))))))

(defun forj-chat--flush-notices ()
  "Show the notices held while a reply streamed."
  (let ((held (reverse (forj-session-held-notices forj-session))))
    (setf (forj-session-held-notices forj-session) nil)
    (mapc #'forj-chat--add-notice held)))

;;; Reading the record

(defun forj-chat--heading-lines (beg end)
  "The role heading lines between BEG and END.
A list of (ROLE LINE-START LINE-END).
Code blocks do not hide headings: a reply cut inside a code block must
not swallow the rest of the record.  Heading lines that the model or
the user write are escaped instead (`forj-chat--escape-headings')."
  (save-excursion
    (goto-char beg)
    (let ((found nil))
      (while (re-search-forward forj-chat--heading-re end t)
        (push (list (pcase (match-string-no-properties 1)
                      ("User" "user") ("Assistant" "assistant") (_ "tool"))
                    (match-beginning 0) (match-end 0))
              found))
      (nreverse found))))

(defun forj-chat--sections (&optional end)
  "The chat's sections up to END: a list of (ROLE BEG END)."
  (let* ((end (or end (point-max)))
         (headings (forj-chat--heading-lines (point-min) end)))
    (cl-loop for (heading . rest) on headings
             collect (list (nth 0 heading)
                           (min end (1+ (nth 2 heading)))
                           (if rest (nth 1 (car rest)) end)))))

(defun forj-chat--text-of (text)
  "TEXT without notice lines, trimmed."
  (string-trim (replace-regexp-in-string (concat "^" forj-chat--notice-prefix ".*\n?") "" text)))

(defun forj-chat--text (beg end)
  "The text between BEG and END without notices, trimmed."
  (string-trim
   (replace-regexp-in-string
    (concat "^" forj-chat--notice-prefix ".*\n?") ""
    (buffer-substring-no-properties beg end))))

(defun forj-chat--blocks (beg end info)
  "The contents of the fenced blocks with INFO between BEG and END."
  (save-excursion
    (goto-char beg)
    (let ((found nil))
      (while (re-search-forward (concat "^```" info "[ \t]*$") end t)
        (let ((start (1+ (point))))
          (when (re-search-forward "^```[ \t]*$" end t)
            (push (buffer-substring-no-properties start (match-beginning 0)) found))))
      (nreverse found))))

(defun forj-chat--native-p ()
  "Return non-nil when this chat talks to the model through native functions."
  (and (plist-get (forj-session-provider forj-session) :native-tools) (not (eq (forj-chat-effective-tools-mode) 'disabled))))

(defun forj-chat--transcript (&optional record)
  "The transcript of RECORD (default: this chat's record)."
  (mapconcat (lambda (entry) (plist-get entry :text)) (or record (forj-session-record forj-session)) ""))

(defun forj-chat--record-add (role text)
  "Add an entry of ROLE with TEXT at the end of the record; return it."
  (let ((entry (list :role role :text text)))
    (setf (forj-session-record forj-session) (append (forj-session-record forj-session) (list entry)))
    (run-hooks 'forj-chat-record-changed-hook)
    entry))

(defun forj-chat-messages (&optional record)
  "The conversation as provider-neutral messages, read from RECORD.
RECORD defaults to the chat's record.  The context the user added
comes first; a summary replaces what it summarises
\(`forj-compact-messages')."
  (let ((native (forj-chat--native-p))
        (transcript (forj-chat--transcript record)))
    (forj-context-messages
     (forj-compact-messages
      (with-temp-buffer
        (insert transcript)
        (forj-chat--parse-messages native))))))

(defun forj-chat--parse-messages (native)
  "The messages of the transcript in the current buffer.
NATIVE non-nil reads tool-call blocks as native calls."
  (let ((messages nil)
        (last-calls nil))
    (dolist (section (forj-chat--sections))
      (pcase-let ((`(,role ,beg ,send) section))
        (pcase role
          ("user"
           (let ((text (forj-chat--text beg send)))
             (unless (string-empty-p text) (push (list :role "user" :text text) messages))))
          ("assistant"
           (let* ((entries (and native (forj-tools-parse-region beg send)))
                  (calls (delq nil (mapcar (lambda (e) (plist-get e :call)) entries)))
                  (text (if native
                            (forj-chat--without-blocks beg send entries)
                          (forj-chat--text beg send))))
             (setq last-calls calls)
             (unless (and (string-empty-p text) (null calls))
               (push (list :role "assistant" :text text :calls calls) messages))))
          ("tool"
           (let ((blocks (forj-chat--blocks beg send "tool-result")))
             (if (not native)
                 (when blocks
                   (push (list :role "user"
                               :text (mapconcat (lambda (b) (concat "```tool-result\n" b "```")) blocks "\n"))
                         messages))
               (forj-chat--native-results blocks last-calls (lambda (m) (push m messages)))))))))
    (forj-chat--drop-unanswered (nreverse messages))))

(defun forj-chat--without-blocks (beg end entries)
  "The text between BEG and END without the tool-call blocks of ENTRIES."
  (let ((pieces nil) (from beg))
    (dolist (entry entries)
      (when (plist-get entry :call)
        (push (buffer-substring-no-properties from (plist-get entry :beg)) pieces)
        (setq from (plist-get entry :end))))
    (push (buffer-substring-no-properties from end) pieces)
    (with-temp-buffer
      (insert (apply #'concat (nreverse pieces)))
      (forj-chat--text (point-min) (point-max)))))

(defun forj-chat--native-results (blocks last push)
  "Give PUSH the messages for result BLOCKS that answer the list LAST.
LAST holds the native calls of the reply before.  Their results
become one tool message; any other result (of a block that was not
a call) goes as user text."
  (let ((ids (mapcar (lambda (c) (plist-get c :id)) last))
        (results nil) (others nil))
    (dolist (block blocks)
      (let ((json (ignore-errors (forj-tools-json-decode block))))
        (if (and json (member (plist-get json :id) ids))
            (push (list :id (plist-get json :id) :name (plist-get json :name)
                        :content (string-trim block))
                  results)
          (push (concat "```tool-result\n" block "```") others))))
    (when results (funcall push (list :role "tool" :results (nreverse results))))
    (when others (funcall push (list :role "user" :text (string-join (nreverse others) "\n"))))))

(defun forj-chat--drop-unanswered (messages)
  "Drop from MESSAGES each native call left without a result.
Providers refuse a call left unanswered (a stopped turn leaves some)."
  (cl-loop for (message . rest) on messages
           collect (if (and (equal (plist-get message :role) "assistant") (plist-get message :calls))
                       (let* ((next (car rest))
                              (answered (and (equal (plist-get next :role) "tool")
                                             (mapcar (lambda (r) (plist-get r :id))
                                                     (plist-get next :results)))))
                         (plist-put (copy-sequence message) :calls
                                    (cl-remove-if-not (lambda (c) (member (plist-get c :id) answered))
                                                      (plist-get message :calls))))
                     message)))

;;; The system prompt

(defun forj-chat-system-prompt ()
  "The system prompt for this chat: the tools, the protocol, the rules."
  (let ((root (forj-session-root forj-session))
        (tools (append (forj-session-tools forj-session) nil)))
    (concat
     "You are forj, a coding agent working inside Emacs with a user on the project at "
     root ".  Answer in Markdown.\n\n"
     (cond
      ((eq (forj-chat-effective-tools-mode) 'disabled)
       "Tools are disabled in this conversation: answer from what the user shows you.\n")
      ((forj-chat--native-p)
       (concat "Use the functions you are given to read and change the project.  "
               (forj-chat--rules)))
      (t
       (concat
        "## Tools\n\n"
        "To use a tool, write a fenced code block with the info string `tool-call` holding "
        "one JSON object: a unique \"id\", the tool's \"name\" and its \"args\".  One call per "
        "block; you may write several blocks in one message, and they run in order.  Then "
        "stop and wait: forj runs the calls (the user reviews edits first) and answers with "
        "one `tool-result` block per call: {\"id\", \"name\", \"ok\": true, \"result\"} or "
        "{\"id\", \"name\", \"ok\": false, \"error\": {\"type\", \"message\", \"details\", "
        "\"recovery\"}}.  Follow the recovery steps of an error.\n\n"
        "Example:\n\n"
        "```tool-call\n{\"id\": \"1\", \"name\": \"read_file\", \"args\": {\"path\": \"README.md\"}}\n```\n\n"
        "answered by\n\n"
        "```tool-result\n{\"id\": \"1\", \"name\": \"read_file\", \"ok\": true, \"result\": "
        "{\"path\": \"README.md\", \"content\": \"# Demo\\n\", \"truncated\": false}}\n```\n\n"
        (forj-chat--rules)
        "\n## The tools (JSON Schema of args)\n\n"
        (mapconcat (lambda (tool)
                     (format "### %s\n%s\nargs: %s\n"
                             (plist-get tool :name) (plist-get tool :description)
                             (forj-tools-json-encode (plist-get tool :parameters))))
                   tools "\n"))))
     (forj-chat--permission-prompt)
     (if forj-chat-extra-instructions (concat "\n" forj-chat-extra-instructions "\n") ""))))

(defun forj-chat--permission-prompt ()
  "The sentences the worker's rules add to the system prompt, as a section."
  (if (or (null (forj-session-permission-instructions forj-session))
          (eq (forj-chat-effective-tools-mode) 'disabled))
      ""
    (concat "\n## Rules of this project\n\n"
            (mapconcat (lambda (line) (concat "- " line "\n"))
                       (cl-remove-if-not #'stringp (forj-session-permission-instructions forj-session)) ""))))

(defun forj-chat--rules ()
  "The rules the model will meet."
  (concat
   "Rules: paths are relative to the project root and stay inside it.  Read a file "
   "(read_file) before you change it, and read it again if it changed; an edit based on "
   "stale content is refused.  Prefer `edit` or `edit_region` to rewriting whole files.  "
   "The user may deny a call and say why: take the reason into account.  Keep going until "
   "the task is done, then answer without tool calls.\n"))

;;; Sending and the loop

(defun forj-chat--input-text ()
  "The text the user typed after the input marker."
  (buffer-substring-no-properties forj-chat--input (point-max)))

(defun forj-chat-send ()
  "Send the text after the last \"## User\" heading to the model."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle)
    (user-error (substitute-command-keys
                 "A reply is still under way; \\<forj-chat-mode-map>\\[forj-chat-stop] stops it (your text is kept)")))
  (let ((typed (forj-chat--input-text)))
    (cond
     ((string-empty-p (forj-chat--text-of typed))
      (user-error "Type your message below the last \"## User\" heading"))
     ((null (forj-session-provider forj-session))
      (setf (forj-session-provider forj-session) (forj-chat--choose-provider))))
    (forj-chat--check-provider)
    (forj-chat--confirm-root)
    (forj-chat--start-turn typed "")
    (goto-char (point-max))))

(defun forj-chat--check-provider ()
  "Signal a `user-error' saying what to do when this chat cannot ask a model."
  (unless (forj-session-provider forj-session)
    (user-error "No language model yet: M-x forj-setup configures one (M-x forj-demo needs none)"))
  (unless (or (plist-get (forj-session-provider forj-session) :model)
              (eq (plist-get (forj-session-provider forj-session) :family) 'scripted))
    (user-error "The provider %s has no model yet: choose one with M-x forj-set-model"
                (plist-get (forj-session-provider forj-session) :name))))

(defun forj-chat--confirm-root ()
  "Make sure the user chose this chat's project root, or signal a `user-error'."
  (unless (or (forj-session-root-confirmed forj-session)
              (yes-or-no-p (format "This chat file names the project %s; let the model work there? "
                                   (forj-session-root forj-session))))
    (user-error "Not sent; open a chat on your project with M-x forj"))
  (setf (forj-session-root-confirmed forj-session) t))

(defun forj-chat--start-turn (text draft)
  "Start a turn: add TEXT as the user's message (unless nil), ask the model.
DRAFT is what the input holds afterwards.  A turn starts with each
user message, `forj-continue' and `forj-retry': the tool batches are
counted again from zero."
  (cl-incf (forj-session-turn forj-session))
  (setf (forj-session-iterations forj-session) 0 (forj-session-capped forj-session) nil (forj-session-cancelled forj-session) nil
        (forj-session-continuation forj-session) nil)
  ;; The worker groups checkpoints and turn-scoped rules by this id.
  (setf (forj-session-turn-id forj-session) (forj-chat-new-turn-id))
  (when text
    (let ((entry (forj-chat--record-add-user
                  (concat "\n## User\n\n"
                          (replace-regexp-in-string "[ \t\n]+\\'" "" (forj-chat--escape text))
                          "\n\n")
                  (forj-session-turn-id forj-session))))
      (let ((inhibit-read-only t))
        (delete-region forj-chat--out (point-max)))
      (forj-chat--view-entry entry)
      (forj-chat--insert-prompt draft)))
  (forj-chat--with-worker #'forj-chat--request))

(defun forj-chat--record-add-user (text turn)
  "Add the user's message TEXT, the start of TURN, to the record; return it.
The entry keeps its turn id and time: checkpoints and rewind name them."
  (let ((forj-chat-record-changed-hook nil))
    (forj-chat--record-add "user" text))
  (let ((entry (car (last (forj-session-record forj-session)))))
    (nconc entry (list :turn turn :time (float-time)))
    (run-hooks 'forj-chat-record-changed-hook)
    entry))

(defun forj-chat--with-worker (then)
  "Start the project's worker if needed, learn its tools, then call THEN."
  (let ((buffer (current-buffer))
        (turn (forj-session-turn forj-session)))
    (setf (forj-session-state forj-session) 'streaming)
    (forj-worker-ensure
     (forj-session-root forj-session)
     (lambda (worker)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (forj-chat--worker-ready worker)
           (when (= turn (forj-session-turn forj-session))
             (forj-chat-load-tools worker then)))))
     (lambda (err)
       (when (and (buffer-live-p buffer) (= turn (forj-session-turn (buffer-local-value 'forj-session buffer))))
         (with-current-buffer buffer
           (forj-chat--notice (format "the tool worker could not start: %s"
                                      (or (plist-get err :message) err)))
           (forj-chat--end-turn (list :kind 'failed))))))))

(defun forj-chat--insert-out (text)
  "Insert TEXT in the view at the output marker, as history.
The user's point stays where it is."
  (let ((inhibit-read-only t))
    (save-excursion
      (goto-char forj-chat--out)
      (let ((from (point)))
        (insert text)
        (forj-chat--seal from (point))))))

(defun forj-chat--request ()
  "Start the model's next reply, compacting the conversation first if it is due."
  (unless (forj-compact-before-request #'forj-chat--request)
    (forj-chat--request-now)))

(defun forj-chat--request-now ()
  "Start the model's next reply under a new \"## Assistant\" heading."
  (let ((buffer (current-buffer))
        (messages (forj-chat-messages)))
    (setf (forj-session-stop-info forj-session) nil)
    (setq forj-chat--reply-view (copy-marker forj-chat--out))
    (forj-chat--insert-out (forj-chat--heading "## Assistant"))
    (forj-chat--insert-out "\n\n")
    (setf forj-chat--reply-start (copy-marker forj-chat--out)
          (forj-session-reply forj-session) ""
          (forj-session-state forj-session) 'streaming)
    (force-mode-line-update)
    (setf (forj-session-stream forj-session)
          (forj-provider-start
           (forj-session-provider forj-session) (forj-chat-system-prompt) messages
           (and (not (eq (forj-chat-effective-tools-mode) 'disabled)) (append (forj-session-tools forj-session) nil))
           (list :on-text (lambda (text)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (forj-chat--reply-text text))))
                 :on-stop (lambda (info)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (setf (forj-session-stop-info forj-session) info))))
                 :on-wait (lambda (seconds attempt message)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer
                                (forj-chat--waiting seconds attempt message))))
                 :on-call (lambda (call)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (forj-chat--insert-call call))))
                 :on-usage (forj-usage-recorder buffer (forj-session-provider forj-session))
                 :on-done (lambda ()
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (forj-chat--reply-done))))
                 :on-error (lambda (message)
                             (when (buffer-live-p buffer)
                               (with-current-buffer buffer
                                 (forj-chat--reply-failed message)))))))))

(defun forj-chat--reply-text (text)
  "Add TEXT, streamed by the model, to the reply and show it."
  (forj-chat--clear-wait)
  (when forj-chat--reply-start
    (setf (forj-session-reply forj-session) (concat (forj-session-reply forj-session) text))
    (forj-chat--insert-out text)))

(defun forj-chat--insert-call (call)
  "Write a native CALL as a tool-call block, to keep it in the record."
  (when forj-chat--reply-start
    (forj-chat--reply-text
     (concat (if (or (string-empty-p (forj-session-reply forj-session)) (string-suffix-p "\n" (forj-session-reply forj-session))) "" "\n")
             "\n```tool-call\n"
             (forj-tools-json-encode (list :id (or (plist-get call :id) "")
                                           :name (or (plist-get call :name) "")
                                           :args (plist-get call :args)))
             "\n```\n"))))

(defconst forj-chat--escaped-line-re
  (concat "^\\(" (substring forj-chat--heading-re 1) "\\|" forj-chat--notice-prefix "\\)")
  "A line that forj escapes in what the model or the user writes.")

(defun forj-chat--escape (text)
  "TEXT with its role heading and notice lines escaped by a backslash.
Only forj writes headings that divide the record, and notices."
  (replace-regexp-in-string forj-chat--escaped-line-re "\\\\\\&" text))

(defun forj-chat--unescape (text)
  "TEXT with the escapes of `forj-chat--escape' taken out."
  (replace-regexp-in-string (concat "^\\\\" (substring forj-chat--escaped-line-re 1)) "\\1" text))

(defun forj-chat--finish-reply ()
  "Record the reply just streamed and draw it for reading.
Headings in it are escaped; it ends with a newline."
  (let* ((reply (forj-chat--escape (forj-session-reply forj-session)))
         (reply (if (or (string-empty-p reply) (string-suffix-p "\n" reply)) reply (concat reply "\n")))
         (entry (forj-chat--record-add "assistant" (concat "## Assistant\n\n" reply))))
    (forj-chat--clear-wait)
    (let ((inhibit-read-only t))
      (delete-region forj-chat--reply-view forj-chat--out))
    (forj-chat--view-entry entry)
    (set-marker forj-chat--reply-view nil)
    (set-marker forj-chat--reply-start nil)
    (setf forj-chat--reply-view nil
          forj-chat--reply-start nil
          (forj-session-reply forj-session) nil
          (forj-session-stream forj-session) nil)
    (forj-chat--flush-notices)
    entry))

(defun forj-chat--reply-failed (message)
  "The reply ended in MESSAGE: keep the text, say what happened, end the turn."
  (let* ((entry (and forj-chat--reply-start (forj-chat--finish-reply)))
         (said (and entry (not (string-blank-p
                                (cdr (forj-chat--split-heading (plist-get entry :text))))))))
    (forj-chat--notice
     (concat message
             (if said "  (the text so far is kept)" "")
             (substitute-command-keys
              "  \\<forj-chat-mode-map>\\[forj-continue] (M-x forj-continue) tries again")))
    (forj-chat--end-turn
     (if said
         (list :kind 'failed
               :text (format "Your last reply was interrupted (%s).  Go on from where it stopped."
                             message))
       (list :kind 'failed)))))

(defun forj-chat--entry-calls (entry)
  "The tool-call blocks of the record's ENTRY, parsed in the transcript.
Line numbers in error messages count from the start of the transcript."
  (let* ((before (forj-chat--transcript (cl-subseq (forj-session-record forj-session) 0
                                                   (cl-position entry (forj-session-record forj-session)))))
         (text (plist-get entry :text)))
    (with-temp-buffer
      (insert before text)
      (forj-tools-parse-region (+ 1 (length before) (length "## Assistant\n\n")) (point-max)))))

(defun forj-chat--reply-done ()
  "Finish a complete reply: run the tool-call blocks in it, or end the turn.
A reply cut by the token limit or refused runs none of its calls."
  (let* ((stop (forj-session-stop-info forj-session))
         (entry (forj-chat--finish-reply))
         (calls (forj-chat--entry-calls entry)))
    (setf (forj-session-stop-info forj-session) nil)
    (cond
     ((eq (plist-get stop :kind) 'length) (forj-chat--reply-cut stop calls))
     ((eq (plist-get stop :kind) 'refusal) (forj-chat--reply-refused stop calls))
     ((null calls) (forj-chat--turn-done))
     ((>= (forj-session-iterations forj-session) (forj-chat-max-iterations))
      (forj-chat--refuse-batch calls))
     (t (forj-chat--run-batch calls)))))

(defun forj-chat-max-iterations ()
  "How many tool batches one user message may lead to in this chat.
`forj-chat-max-tool-iterations', else the worker's configuration."
  (or forj-chat-max-tool-iterations
      (let* ((worker (and (forj-session-root forj-session) (forj-worker-get (forj-session-root forj-session))))
             (config (and worker (plist-get (forj-worker-hello worker) :config)))
             (limit (plist-get (plist-get (plist-get config :effective) :tools)
                               :max_tool_iterations_per_user_turn)))
        (and (natnump limit) (> limit 0) limit))
      4))

(defun forj-chat--answer-unrun (entries message recovery)
  "Answer the tool-call ENTRIES, which will not run, with MESSAGE; record it.
RECOVERY is the step the model reads next."
  (forj-chat--results-heading)
  (let ((batch (forj-tools--new-batch entries forj-chat--out nil)))
    (forj-tools--fail-all batch (list :type "validation-error" :message message
                                      :recovery (vector recovery)))
    (set-marker forj-chat--out (forj-tools-batch-end batch))
    (forj-chat--record-results entries (append (forj-tools-batch-results batch) nil))
    (forj-chat--insert-out "\n")))

(defun forj-chat--reply-cut (stop entries)
  "Show that the token limit cut the reply (STOP has why); do not run its ENTRIES.
The user may let the model go on with `forj-continue'."
  (let* ((cut-call (plist-get stop :cut-call))
         (open-block (cl-find-if (lambda (e) (plist-get e :error)) entries))
         (where (cond (cut-call (format ", in the middle of a call to %s, which was dropped" cut-call))
                      (open-block ", in the middle of a tool-call block")
                      (t ""))))
    (when entries
      (forj-chat--answer-unrun
       entries "Not run: your reply was cut off by the output token limit"
       "Write the call again, whole, when you go on"))
    (forj-chat--notice
     (concat (format "the reply was cut off by the output token limit (%s)%s; none of its tool calls ran."
                     (plist-get stop :reason) where)
             (substitute-command-keys
              "  \\<forj-chat-mode-map>\\[forj-continue] (M-x forj-continue) lets the model go on; a larger :max-tokens in `forj-providers' gives it more room")))
    (forj-chat--end-turn
     (list :kind 'cut
           :text (format "Your last reply was cut off by the output token limit%s.  No tool call of it ran.  Go on from exactly where it stopped, and write any tool call again, whole."
                         (if cut-call (format " in the middle of a call to %s" cut-call) ""))))))

(defun forj-chat--reply-refused (stop entries)
  "The model or its provider refused to answer (STOP gives the reason).
Its tool-call ENTRIES, if any, do not run."
  (when entries
    (forj-chat--answer-unrun entries "Not run: the reply was stopped by the provider's safety system"
                             "Answer the user without this call"))
  (forj-chat--notice
   (concat (format "%s refused to answer: %s."
                   (or (plist-get (forj-session-provider forj-session) :name) "the provider")
                   (plist-get stop :reason))
           (substitute-command-keys
            "  \\<forj-chat-mode-map>\\[forj-retry] (M-x forj-retry) asks again; with C-u, another model")))
  (forj-chat--end-turn))

(defvar-local forj-chat--results-view nil
  "Marker: where the view of the tool results being drawn starts.")

(defun forj-chat--results-heading ()
  "Start the \"## Tool results\" section in the view."
  (setq forj-chat--results-view (copy-marker forj-chat--out))
  (forj-chat--insert-out "\n")
  (forj-chat--insert-out (forj-chat--heading "## Tool results"))
  (forj-chat--insert-out "\n\n"))

(defun forj-chat--record-results (entries results)
  "Add the tool results section of ENTRIES and their RESULTS to the record.
It holds, per call, its header line and a tool-result block with the
result's JSON, which is what the model reads.  The view of the section
\(from its heading to the output marker) is tied to the new entry."
  (forj-chat--tie-view
   forj-chat--results-view
   (forj-chat--record-add "tool" (forj-chat--results-text entries results)))
  (setq forj-chat--results-view nil))

(defun forj-chat--results-text (entries results)
  "The transcript of the tool results section of ENTRIES and their RESULTS."
  (concat "\n## Tool results\n\n"
          (cl-loop for entry in entries
                   for result in results
                   concat (concat (forj-tools-header-text entry result) "\n"
                                  (if result
                                      (concat "```tool-result\n" (forj-tools-json-encode result) "\n```\n")
                                    "")))
          "\n"))

(defun forj-chat--tie-view (start entry)
  "Tie the view from START to the output marker to the record's ENTRY."
  (when (markerp start)
    (with-silent-modifications
      (put-text-property start forj-chat--out 'forj-entry entry))
    (set-marker start nil)))

(defun forj-chat--run-batch (entries)
  "Run the tool-call ENTRIES of the reply as one batch, then resume the model."
  (cl-incf (forj-session-iterations forj-session))
  (let ((buffer (current-buffer))
        (turn (forj-session-turn forj-session)))
    (forj-chat--results-heading)
    (setf (forj-session-state forj-session) 'tools)
    (force-mode-line-update)
    ;; What the model has read so far, heading of these results and prompt
    ;; included, as the transcript would hold it.
    (setq-local forj-tools-capacity-bytes
                (max 4096 (- forj-chat-context-bytes
                             (+ (length (forj-chat--transcript))
                                (length "\n## Tool results\n\n")
                                (length "\n## User\n\n")
                                (length (forj-chat--input-text))))))
    (let ((forj-tools-turn (forj-session-turn-id forj-session))
          (forj-tools-plan-mode (pcase forj-chat-tools-mode
                                  ('parse-only "parse_only")
                                  ('disabled "disabled")
                                  (_ "enabled"))))
      (setf (forj-session-batch forj-session)
            (forj-tools-run-entries
             entries forj-chat--out
             (lambda (results)
               (when (buffer-live-p buffer)
                 (with-current-buffer buffer (forj-chat--batch-done turn entries results))))
             (forj-session-root forj-session))))))

(defun forj-chat--batch-done (turn entries results)
  "The batch of TURN has RESULTS for ENTRIES: resume the model unless stopped."
  (let ((batch (forj-session-batch forj-session)))
    (when batch
      (set-marker forj-chat--out (forj-tools-batch-end batch))
      (setf (forj-session-batch forj-session) nil))
    (if (and forj-chat-batch-interrupted-function
             (= turn (forj-session-turn forj-session))
             (not (forj-session-cancelled forj-session))
             (cl-some (lambda (r) (equal (plist-get (plist-get r :error) :type) "worker-died")) results))
        ;; The journal knows what ran; the results here only say the
        ;; connection went.  Recovery tells the model what happened.
        (progn
          (let ((inhibit-read-only t))
            (when (markerp forj-chat--results-view)
              (delete-region forj-chat--results-view forj-chat--out)
              (set-marker forj-chat--results-view nil)))
          (setq forj-chat--results-view nil)
          (funcall forj-chat-batch-interrupted-function entries results batch))
      (forj-chat--batch-recorded batch turn entries results))))

(defun forj-chat--batch-recorded (batch turn entries results)
  "Record RESULTS of ENTRIES (of BATCH, of TURN); resume the model unless stopped."
  (forj-chat--record-results entries results)
  (forj-chat--insert-out "\n")
  (setf (forj-session-state forj-session) 'streaming)
  (forj-chat--flush-notices)
  (if (or (forj-session-cancelled forj-session)
          (/= turn (forj-session-turn forj-session))
          (and batch (forj-tools-batch-cancelled batch))
          (forj-chat--turn-stops batch))
      (progn
        (when (and batch (forj-tools-batch-cancelled batch))
          (forj-chat--notice "the batch was cancelled in review; the model was not resumed"))
        (forj-chat--end-turn))
    (forj-chat--request)))

(defun forj-chat--refuse-batch (entries)
  "Refuse the tool-call ENTRIES of the reply: the iteration limit is reached.
Resume the model once more at most."
  (let ((buffer (current-buffer))
        (again (forj-session-capped forj-session)))
    (setf (forj-session-capped forj-session) t)
    (forj-chat--results-heading)
    (let ((batch (forj-tools-refuse-entries
                  entries forj-chat--out
                  (format "Max tool iterations reached (%d per user message); no call was run"
                          (forj-chat-max-iterations)))))
      (set-marker forj-chat--out (forj-tools-batch-end batch))
      (forj-chat--record-results entries (append (forj-tools-batch-results batch) nil))
      (forj-chat--insert-out "\n")
      (if again
          (forj-chat--end-turn)
        (with-current-buffer buffer (forj-chat--request))))))

(defun forj-chat--end-turn (&optional continuation)
  "The turn is over: the prompt is the user's again.
CONTINUATION, a plist (:kind KIND :text TEXT), is what `forj-continue'
does next: send TEXT as a message (or, without TEXT, ask the model
again).  A turn that reached the iteration limit offers to go on."
  (setf (forj-session-state forj-session) 'idle
        forj-chat--reply-start nil
        (forj-session-stream forj-session) nil
        (forj-session-batch forj-session) nil
        (forj-session-continuation forj-session) continuation)
  (forj-chat--clear-wait)
  (forj-chat--flush-notices)
  (when (and (forj-session-capped forj-session) (not (forj-session-cancelled forj-session)) (null continuation))
    (let ((limit (forj-chat-max-iterations)))
      (setf (forj-session-continuation forj-session)
            (list :kind 'capped
                  :text (format "Go on with the task: you may use tools for %d more batches." limit)))
      (forj-chat--notice
       (concat (format "this message reached its limit of %d tool batches." limit)
               (substitute-command-keys
                "  \\<forj-chat-mode-map>\\[forj-continue] (M-x forj-continue) lets the model go on")))))
  (force-mode-line-update)
  (when (and (get-buffer-window (current-buffer)) (not noninteractive))
    (message "forj: your turn")))

(defun forj-continue ()
  "Let the model go on where it stopped.
After the iteration limit, the model gets as many tool batches again;
after a reply the token limit cut, it is asked to go on from the cut;
after a failed or stopped reply, it is asked again.  Your draft in the
input stays."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle)
    (user-error "A reply is still under way"))
  (unless (forj-session-continuation forj-session)
    (user-error "Nothing stopped early here; type your next message"))
  (forj-chat--check-provider)
  (forj-chat--confirm-root)
  (forj-chat--start-turn (plist-get (forj-session-continuation forj-session) :text) (forj-chat--input-text)))

(defun forj-retry (&optional other-model)
  "Ask the model for its last reply again; OTHER-MODEL: choose the model first.
The last reply and what followed it (its tool results, notices) leave
the chat, and the model answers again from there.  Files its tool
calls changed stay as they are.  Interactively, OTHER-MODEL is the
prefix argument."
  (interactive "P")
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle)
    (user-error "A reply is still under way; stop it first"))
  (let* ((role (lambda (e) (plist-get e :role)))
         (index (cl-position "assistant" (forj-session-record forj-session) :key role :test #'equal :from-end t))
         (unanswered (cl-position "user" (forj-session-record forj-session) :key role :test #'equal
                                  :start (if index (1+ index) 0))))
    ;; A message of yours after the last reply was never answered: that
    ;; is the reply to ask for, and nothing leaves the chat.
    (when unanswered (setq index nil))
    (unless (or index unanswered) (user-error "There is no reply to retry yet"))
    (when other-model (call-interactively #'forj-set-model))
    (forj-chat--check-provider)
    (forj-chat--confirm-root)
    (when index
      (let ((ran (cl-some (lambda (e) (equal (plist-get e :role) "tool")) (nthcdr index (forj-session-record forj-session)))))
        (setf (forj-session-record forj-session) (cl-subseq (forj-session-record forj-session) 0 index))
        (forj-chat--redraw (forj-chat--input-text))
        (when ran
          (forj-chat--notice "retrying a reply whose tool calls ran: the files they changed stay as they are"))))
    (forj-chat--start-turn nil nil)))

;;; Waiting to retry

(defun forj-chat--waiting (seconds attempt message)
  "Show the countdown to retry ATTEMPT, in SECONDS, after the provider's MESSAGE.
It shows above the reply and in the header line."
  (forj-chat--clear-wait)
  (let ((overlay (make-overlay forj-chat--reply-start forj-chat--reply-start))
        (buffer (current-buffer)))
    (setq forj-chat--wait (list :at (+ (float-time) seconds) :attempt attempt :message message
                                :overlay overlay))
    (plist-put forj-chat--wait :timer
               (run-at-time 1 1 (lambda ()
                                  (when (buffer-live-p buffer)
                                    (with-current-buffer buffer (forj-chat--show-wait))))))
    (forj-chat--show-wait)))

(defun forj-chat--wait-text ()
  "The countdown of the retry being waited for."
  (let ((left (max 0 (ceiling (- (plist-get forj-chat--wait :at) (float-time))))))
    (substitute-command-keys
     (format "retry %d of %d in %d s…  \\<forj-chat-mode-map>\\[forj-chat-stop] stops"
             (plist-get forj-chat--wait :attempt) forj-provider-retries left))))

(defun forj-chat--show-wait ()
  "Show the countdown of the retry being waited for."
  (when forj-chat--wait
    (overlay-put (plist-get forj-chat--wait :overlay) 'before-string
                 (propertize (format "⏳ %s: %s\n" (plist-get forj-chat--wait :message) (forj-chat--wait-text))
                             'face 'forj-chat-notice))
    (force-mode-line-update)))

(defun forj-chat--clear-wait ()
  "Take the countdown of a retry away: it was sent, or the turn ended."
  (when forj-chat--wait
    (let ((timer (plist-get forj-chat--wait :timer)))
      (when (timerp timer) (cancel-timer timer)))
    (delete-overlay (plist-get forj-chat--wait :overlay))
    (setq forj-chat--wait nil)
    (force-mode-line-update)))

(defun forj-chat-stop ()
  "Stop the reply being streamed or the tools running; do not resume."
  (interactive)
  (setf (forj-session-cancelled forj-session) t)
  (cl-incf (forj-session-turn forj-session))
  (pcase (forj-session-state forj-session)
    ('streaming
     (forj-provider-stop (forj-session-stream forj-session))
     (let* ((entry (and forj-chat--reply-start (forj-chat--finish-reply)))
            (said (and entry (not (string-blank-p
                                   (cdr (forj-chat--split-heading (plist-get entry :text))))))))
       (forj-chat--notice "stopped by the user")
       (forj-chat--end-turn (if said
                                (list :kind 'stopped :text "Go on from where you stopped.")
                              (list :kind 'stopped)))))
    ('tools
     (let ((batch (forj-session-batch forj-session)))
       (cond
        ((null batch) (forj-chat--end-turn))
        ((forj-tools--manual-entries batch)
         ;; Parse-only: the calls waiting for the user's results are cancelled.
         (forj-tools--fail-all batch (list :type "cancelled" :message "The user stopped the turn"
                                           :recovery ["Ask the user how to go on"])))
        (t
         (let ((review (forj-tools-batch-review batch)))
           (when (buffer-live-p review)
             (with-current-buffer review (forj-review-cancel))))
         (when (and (forj-tools-batch-batch-id batch) (forj-tools-batch-worker batch))
           (forj-epc-call (forj-worker-connection (forj-tools-batch-worker batch)) "cancel"
                          (list :batch_id (forj-tools-batch-batch-id batch))))
         (message "forj: stopping the tools…")))))
    (_ (message "forj: nothing to stop"))))

;;; The view

(defun forj-chat--heading (text)
  "TEXT as a role heading of the view."
  (propertize text 'face 'forj-chat-heading 'font-lock-face 'forj-chat-heading
              'forj-heading t 'forj-rendered t))

(defun forj-chat--setup-view ()
  "Make the buffer a view of its record: read the text as a transcript, draw it."
  (setq-local forj-tools-result-style 'rendered)
  (setq-local forj-tools-after-render-function #'forj-chat--seal)
  (unless (eq font-lock-fontify-region-function #'forj-chat--fontify-region)
    (setq-local forj-chat--fontify-original font-lock-fontify-region-function)
    (setq-local font-lock-fontify-region-function #'forj-chat--fontify-region))
  (unless (eq font-lock-unfontify-region-function #'forj-chat--unfontify-region)
    (setq-local forj-chat--unfontify-original font-lock-unfontify-region-function)
    (setq-local font-lock-unfontify-region-function #'forj-chat--unfontify-region))
  (setq-local imenu-create-index-function #'forj-chat--imenu-index)
  (setq-local outline-regexp (substring forj-chat--heading-re 1))
  (setq-local outline-level #'forj-chat--outline-level)
  (setq-local revert-buffer-function #'forj-chat--revert)
  (add-hook 'write-contents-functions #'forj-chat--write nil t)
  ;; An auto-save file would hold the view, not the transcript.
  (when buffer-file-name (auto-save-mode -1))
  (forj-chat--load))

(defvar-local forj-chat--fontify-original nil
  "The font-lock function that fontifies what forj did not draw itself.")
(defvar-local forj-chat--unfontify-original nil
  "The font-lock function that unfontifies what forj did not draw itself.")

(defun forj-chat--each-unrendered (beg end function)
  "Call FUNCTION with the bounds of each piece of BEG..END forj did not draw."
  (let ((pos beg))
    (while (< pos end)
      (let ((next (next-single-property-change pos 'forj-rendered nil end)))
        (unless (get-text-property pos 'forj-rendered) (funcall function pos next))
        (setq pos next)))))

(defun forj-chat--fontify-region (beg end &optional loudly)
  "Fontify BEG..END except what forj drew (its faces are its own); LOUDLY as usual."
  (forj-chat--each-unrendered
   beg end (lambda (from to) (funcall (or forj-chat--fontify-original #'font-lock-default-fontify-region)
                                      from to loudly)))
  `(jit-lock-bounds ,beg . ,end))

(defun forj-chat--unfontify-region (beg end)
  "Unfontify BEG..END except what forj drew."
  (forj-chat--each-unrendered
   beg end (lambda (from to) (funcall (or forj-chat--unfontify-original #'font-lock-default-unfontify-region)
                                      from to))))

(defun forj-chat--load ()
  "Take the buffer's text as a transcript: make it the record and draw the view.
A chat drawn already (the mode started again) is drawn again from its record."
  (let ((modified (buffer-modified-p)))
    (if (and (forj-session-record forj-session) (markerp forj-chat--input) (eq (marker-buffer forj-chat--input) (current-buffer)))
        (forj-chat--redraw (forj-chat--input-text))
      (let ((parsed (forj-chat--split (buffer-substring-no-properties (point-min) (point-max)))))
        (setf (forj-session-record forj-session) (car parsed))
        (forj-chat--redraw (cdr parsed))))
    (set-buffer-modified-p modified)
    (buffer-disable-undo)
    (buffer-enable-undo)))

(put 'forj-chat--input 'permanent-local t)

(defun forj-chat--split (text)
  "Split the transcript TEXT into record entries and the draft after its prompt.
Return (ENTRIES . DRAFT).  The last \"## User\" section is the prompt."
  (with-temp-buffer
    (insert text)
    (let* ((headings (forj-chat--heading-lines (point-min) (point-max)))
           (prompt (let ((last (car (last headings)))) (and (equal (car last) "user") last)))
           (sections (if prompt (butlast headings) headings))
           ;; A user or results heading owns the newline before it.
           (cut (lambda (heading) (if (member (car heading) '("user" "tool"))
                                      (max (point-min) (1- (nth 1 heading)))
                                    (nth 1 heading))))
           (end (if prompt (funcall cut prompt) (point-max)))
           (entries nil)
           (from (point-min))
           (role "meta"))
      (dolist (heading sections)
        (let ((bound (funcall cut heading)))
          (when (> bound from)
            (push (list :role role :text (buffer-substring-no-properties from bound)) entries))
          (setq from bound role (car heading))))
      (when (> end from)
        (push (list :role role :text (buffer-substring-no-properties from end)) entries))
      (cons (nreverse entries)
            (if prompt
                (let ((draft (buffer-substring-no-properties (min (point-max) (1+ (nth 2 prompt))) (point-max))))
                  (if (string-prefix-p "\n" draft) (substring draft 1) draft))
              "")))))

(defun forj-chat--redraw (draft)
  "Draw the whole view from the record, with DRAFT in the input."
  (let ((inhibit-read-only t))
    (remove-overlays)
    (erase-buffer)
    (if (markerp forj-chat--out)
        (set-marker forj-chat--out (point-min))
      (setq forj-chat--out (copy-marker (point-min) t)))
    (dolist (entry (forj-session-record forj-session)) (forj-chat--view-entry entry))
    (forj-chat--insert-prompt draft)
    (forj-context-draw)))

(defun forj-chat--insert-prompt (draft)
  "Draw the prompt heading after the history, then DRAFT as the input."
  (let ((inhibit-read-only t)
        (at (marker-position forj-chat--out)))
    (save-excursion
      (goto-char at)
      (insert "\n" (forj-chat--heading "## User") "\n\n")
      (forj-chat--seal at (point))
      (set-marker forj-chat--out at)
      (if (markerp forj-chat--input)
          (set-marker forj-chat--input (point))
        (setq forj-chat--input (copy-marker (point))))
      (insert draft))))

(defun forj-chat--view-entry (entry)
  "Draw the record's ENTRY at the output marker, as history."
  (let ((inhibit-read-only t))
    (save-excursion
      (goto-char forj-chat--out)
      (let ((from (point)))
        (pcase (plist-get entry :role)
          ("assistant" (forj-chat--draw-reply (plist-get entry :text)))
          ("tool" (forj-chat--draw-results entry))
          (_ (insert (plist-get entry :text))
             (forj-chat--mark-lines from (point))))
        (put-text-property from (point) 'forj-entry entry)
        (forj-chat--seal from (point))))))

(defun forj-chat--mark-lines (from to)
  "Give the headings and notices between FROM and TO their faces."
  (save-excursion
    (goto-char from)
    (while (re-search-forward (concat forj-chat--heading-re "\\|^" forj-chat--notice-prefix ".*$") to t)
      (add-text-properties (match-beginning 0) (match-end 0)
                           (if (eq (char-after (match-beginning 0)) ?#)
                               (list 'face 'forj-chat-heading 'forj-heading t 'forj-rendered t)
                             (list 'face 'forj-chat-notice 'forj-rendered t)))
      (unless (eq (char-after (match-beginning 0)) ?#)
        (forj-chat--notice-buttons (match-beginning 0) (match-end 0))))))

(defun forj-chat--split-heading (text)
  "TEXT of an entry as (HEADING-LINE . REST), REST after the heading's newline."
  (if (string-match (concat "\\`\n?\\(" (substring forj-chat--heading-re 1) "\\)\n?") text)
      (cons (match-string 1 text) (substring text (match-end 0)))
    (cons nil text)))

(defun forj-chat--draw-reply (text)
  "Draw the assistant entry TEXT: its prose, each tool call as one line."
  (pcase-let ((`(,heading . ,reply) (forj-chat--split-heading text)))
    (when heading (insert (forj-chat--heading heading) "\n"))
    (let ((start (point)))
      (insert reply)
      (let ((calls (save-restriction
                     (narrow-to-region start (point))
                     (forj-tools-parse-region (point-min) (point-max)))))
        ;; From the last, so positions before stay valid.
        (dolist (call (reverse calls))
          (forj-chat--fold-call call)))
      (forj-chat--mark-lines start (point)))))

(defun forj-chat--fold-call (entry)
  "Show the tool-call block of the parsed ENTRY as one line, its JSON folded away."
  (let* ((beg (plist-get entry :beg))
         (end (min (plist-get entry :end) (point-max)))
         (call (plist-get entry :call))
         (raw (save-excursion
                (goto-char beg)
                (string-trim-right (buffer-substring-no-properties (line-beginning-position 2) end)
                                   "[`~ \t\n]*")))
         (line (if call
                   (forj-render-call-line call)
                 (propertize (format "→ a tool call forj cannot read (%s)" (plist-get entry :error))
                             'face 'forj-render-failed))))
    (save-excursion
      (goto-char beg)
      (insert (forj-render-one-line line) "\n")
      (let* ((block-start (point))
             (fold (make-overlay block-start (+ block-start (- end beg)) nil t nil)))
        (overlay-put fold 'invisible t)
        (overlay-put fold 'evaporate t)
        (overlay-put fold 'forj-render-fold t)
        (add-text-properties beg (+ block-start (- end beg))
                             (list 'forj-raw raw 'forj-raw-kind "call"
                                   'forj-render-fold-overlay fold 'forj-rendered t))))))

(defun forj-chat--calls-before (entry)
  "Map each id to its tool call, for the reply before the record's ENTRY."
  (let* ((position (cl-position entry (forj-session-record forj-session)))
         (reply (cl-find "assistant" (reverse (cl-subseq (forj-session-record forj-session) 0 position))
                         :key (lambda (e) (plist-get e :role)) :test #'equal)))
    (when reply
      (with-temp-buffer
        (insert (plist-get reply :text))
        (delq nil (mapcar (lambda (e) (let ((call (plist-get e :call)))
                                        (and call (cons (plist-get call :id) call))))
                          (forj-tools-parse-region (point-min) (point-max))))))))

(defun forj-chat--draw-results (entry)
  "Draw the tool results ENTRY: each result's header and body, for reading."
  (pcase-let ((`(,heading . ,rest) (forj-chat--split-heading (plist-get entry :text))))
    (insert "\n")
    (when heading (insert (forj-chat--heading heading) "\n\n"))
    (let ((calls (forj-chat--calls-before entry))
          (root (forj-session-root forj-session)))
      (with-temp-buffer
        (insert rest)
        (setq rest (forj-chat--blocks (point-min) (point-max) "tool-result")))
      (dolist (block rest)
        (let* ((result (ignore-errors (forj-tools-json-decode block)))
               (result (and (listp result) (keywordp (car-safe result)) result)))
          (if result
              (forj-tools-insert-result (cdr (assoc (plist-get result :id) calls)) result
                                        'done nil nil root)
            (insert (string-trim block) "\n"))))
      (insert "\n"))))

;;; History

(defconst forj-chat--history-why
  "This is the chat's history, kept as the model read it; type below the last \"## User\" heading, or fork from an earlier message with M-x forj-edit-message"
  "Why the history does not change.")

(autoload 'forj-menu "forj-menu" nil t)

(defvar forj-chat-history-map
  (let ((map (make-sparse-keymap)))
    (dolist (command '(self-insert-command yank yank-pop newline open-line newline-and-indent
                       electric-newline-and-maybe-indent delete-char delete-forward-char
                       delete-backward-char backward-delete-char-untabify kill-line kill-word
                       backward-kill-word kill-region transpose-chars transpose-words
                       quoted-insert upcase-word downcase-word capitalize-word just-one-space
                       delete-horizontal-space fill-paragraph indent-for-tab-command
                       mouse-yank-primary mouse-yank-at-click))
      (define-key map (vector 'remap command) #'forj-chat-history-refuse))
    (define-key map (kbd "RET") #'forj-chat-history-ret)
    (define-key map (kbd "TAB") #'forj-chat-history-tab)
    (define-key map [mouse-2] #'forj-chat-history-mouse)
    (define-key map [follow-link] 'mouse-face)
    (define-key map (kbd "n") #'forj-chat-next-turn)
    (define-key map (kbd "p") #'forj-chat-previous-turn)
    (define-key map (kbd "?") #'forj-menu)
    map)
  "Keymap of the chat's read-only history (a text property there).
Typing, yanking and deleting say why nothing changes; `RET' and the
mouse follow links; `TAB' shows or hides a folded result or call.")

(defun forj-chat--seal (beg end)
  "Make BEG..END read-only history, with its keymap."
  (when (< beg end)
    (with-silent-modifications
      (add-text-properties beg end (list 'read-only forj-chat--history-why
                                         'front-sticky '(read-only keymap)
                                         'rear-nonsticky t
                                         'keymap forj-chat-history-map)))))

(defun forj-chat-history-refuse ()
  "Say why the history does not change."
  (interactive)
  (message "forj: %s" forj-chat--history-why))

(defun forj-chat-history-ret ()
  "Follow the link at point; elsewhere in the history, say why the text stays."
  (interactive)
  (if (button-at (point))
      (push-button (point))
    (forj-chat-history-refuse)))

(defun forj-chat-history-tab ()
  "Show or hide the folded result or call at point."
  (interactive)
  (unless (forj-render-toggle-fold)
    (message "forj: nothing folded here; %s" forj-chat--history-why)))

(defun forj-chat-history-mouse (event)
  "Follow the link clicked with EVENT; elsewhere, say why the text stays."
  (interactive "e")
  (let ((pos (posn-point (event-start event))))
    (if (and pos (button-at pos))
        (push-button event)
      (forj-chat-history-refuse))))

;;; Turns

(defun forj-chat--headings ()
  "The start of every role heading of the view, in order."
  (let ((pos (point-min)) (found nil))
    (while (setq pos (text-property-not-all pos (point-max) 'forj-heading nil))
      (push pos found)
      (setq pos (or (next-single-property-change pos 'forj-heading) (point-max))))
    (nreverse found)))

(defun forj-chat-next-turn (&optional n)
  "Move to the start of the Nth next section of the chat (a role heading)."
  (interactive "p")
  (let* ((n (or n 1))
         (here (line-end-position))
         (later (cl-remove-if-not (lambda (p) (> p here)) (forj-chat--headings))))
    (if (< n 0)
        (forj-chat-previous-turn (- n))
      (if (null later)
          (message "forj: no later turn")
        (goto-char (nth (min (1- (max n 1)) (1- (length later))) later))))))

(defun forj-chat-previous-turn (&optional n)
  "Move to the start of the Nth previous section of the chat (a role heading)."
  (interactive "p")
  (let* ((n (or n 1))
         (here (line-beginning-position))
         (earlier (reverse (cl-remove-if-not (lambda (p) (< p here)) (forj-chat--headings)))))
    (if (null earlier)
        (message "forj: no earlier turn")
      (goto-char (nth (min (1- (max n 1)) (1- (length earlier))) earlier)))))

(define-key forj-chat-mode-map (kbd "C-c C-n") #'forj-chat-next-turn)
(define-key forj-chat-mode-map (kbd "C-c C-p") #'forj-chat-previous-turn)

(defun forj-chat--section-summary (heading)
  "Sum up in a few words the section under the HEADING at point.
Tool results are summed up by the tools they answer."
  (let* ((entry (get-text-property (point) 'forj-entry))
         (summary
          (if (and (equal heading "## Tool results") (equal (plist-get entry :role) "tool"))
              (let ((text (plist-get entry :text)))
                (with-temp-buffer
                  (insert text)
                  (string-join
                   (delete-dups
                    (delq nil (mapcar (lambda (block)
                                        (let ((name (ignore-errors
                                                      (plist-get (forj-tools-json-decode block) :name))))
                                          (and (stringp name) (not (string-empty-p name)) name)))
                                      (forj-chat--blocks (point-min) (point-max) "tool-result"))))
                   ", ")))
            (save-excursion
              (forward-line 1)
              (skip-chars-forward " \t\n")
              (buffer-substring-no-properties (point) (line-end-position))))))
    (truncate-string-to-width (string-trim summary) 50 nil nil "…")))

(defun forj-chat--imenu-index ()
  "An imenu index of the chat: one entry per turn, its sections inside."
  (let ((turns nil) (current nil) (count 0))
    (save-excursion
      (dolist (pos (forj-chat--headings))
        (goto-char pos)
        (let* ((heading (buffer-substring-no-properties pos (line-end-position)))
               (role (string-remove-prefix "## " heading))
               (summary (forj-chat--section-summary heading))
               (item (cons (format "%s: %s" role summary) pos)))
          (cond
           ((and (equal role "User") (>= pos forj-chat--out))
            (when current (push (cons (car current) (nreverse (cdr current))) turns))
            (setq current nil)
            (push (cons "Your next message" pos) turns))
           ((equal role "User")
            (when current (push (cons (car current) (nreverse (cdr current))) turns))
            (cl-incf count)
            (setq current (list (format "%d. %s" count summary) item)))
           (current (push item (cdr current)))
           (t (push item turns))))))
    (when current (push (cons (car current) (nreverse (cdr current))) turns))
    (nreverse turns)))

(defun forj-chat--outline-level ()
  "Return 1 for a user heading (a turn begins), 2 for replies and results."
  (if (looking-at "## User") 1 2))

;;; Forking

(defun forj-edit-message (&optional pos)
  "Fork the conversation from your earlier message at POS (default: point).
The record is cut just before that message: it and everything after it
\(the model's replies, tool results, your later messages) leave the
chat, and its text comes back in the input, to edit and send again
with \\[forj-chat-send].  Files that tools changed meanwhile stay as
they are: forking changes the conversation, not the project.  A draft
you had in the input goes to the kill ring."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle)
    (user-error "A reply is still under way; stop it first"))
  (let* ((entry (get-text-property (or pos (point)) 'forj-entry))
         (index (and entry (cl-position entry (forj-session-record forj-session)))))
    (unless (and index (equal (plist-get entry :role) "user"))
      (user-error "Put point on one of your earlier messages (under a \"## User\" heading)"))
    (when (and (called-interactively-p 'any)
               (not (y-or-n-p (format "Fork from this message (it and the %d entries after it leave the chat)? "
                                      (- (length (forj-session-record forj-session)) index 1)))))
      (user-error "Not forked"))
    (let ((draft (forj-chat--input-text))
          (text (string-trim (forj-chat--unescape (cdr (forj-chat--split-heading (plist-get entry :text)))))))
      (unless (string-blank-p draft)
        (kill-new draft)
        (message "forj: your draft is in the kill ring"))
      (forj-chat-cut-record index text)
      (goto-char (point-max)))))

(defun forj-chat-cut-record (index draft)
  "Cut the record just before its entry at INDEX; put DRAFT in the input.
An answer still due to the old turn is ignored from now on."
  (setf (forj-session-record forj-session) (cl-subseq (forj-session-record forj-session) 0 index))
  (cl-incf (forj-session-turn forj-session))
  (forj-chat--redraw draft)
  (run-hooks 'forj-chat-record-changed-hook))

;;; Saving

(defun forj-save (&optional file)
  "Save this chat to FILE.
FILE defaults to the chat's file, or a new one in `forj-chat-directory'.
Visiting the file later opens it as a chat again."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (let ((change-major-mode-with-file-name nil))
    (forj-chat--save-to file))
  (message "forj: chat saved to %s" (abbreviate-file-name buffer-file-name)))

(defun forj-chat--save-to (file)
  "Save the chat to FILE, its own file, or a new file in `forj-chat-directory'."
  (cond
   (file (write-file file))
   (buffer-file-name (save-buffer))
   (t (make-directory forj-chat-directory t)
      (write-file (expand-file-name
                   (format "%s-%s.md"
                           (file-name-nondirectory (directory-file-name (forj-session-root forj-session)))
                           (format-time-string "%Y%m%d-%H%M%S"))
                   forj-chat-directory)))))

(defun forj-chat--write ()
  "Write the chat's transcript and input to its file.
For `write-contents-functions': the file holds the record, not the view."
  (let ((text (concat (forj-chat--transcript) "\n## User\n\n" (forj-chat--input-text)))
        (coding-system-for-write 'utf-8-unix))
    (write-region text nil buffer-file-name nil t)
    t))

(defun forj-chat--revert (&rest _)
  "Read the chat's file again: record and view."
  (unless buffer-file-name (user-error "This chat has no file"))
  (let ((inhibit-read-only t))
    (setf (forj-session-record forj-session) nil)
    (set-marker forj-chat--input nil)
    (erase-buffer)
    (insert-file-contents buffer-file-name t nil nil t)
    (forj-chat-mode)
    (set-buffer-modified-p nil)))

(provide 'forj-chat)

;; Saved chats, recovery, undo and rewind build on the chat.
(require 'forj-history)
(require 'forj-recover)
(require 'forj-undo)

;;; forj-chat.el ends here
